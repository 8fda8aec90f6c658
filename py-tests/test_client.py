"""RedisClient against a real redis-server."""

from __future__ import annotations

import logging
import mmap
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import RedisServer, ThreadTicks, free_port, pattern

import lmcache_resp
from lmcache_resp import (
    AuthenticationError,
    ClosedError,
    InvalidInputError,
    RedisClient,
    RespConnectionError,
    RespTimeoutError,
    ServerError,
    ValueTooLargeError,
)
from lmcache_resp_testing.servers import pause, redis_py, resume


def client_for(server: RedisServer, **kwargs: object) -> RedisClient:
    return RedisClient("127.0.0.1", server.port, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [0, 1, 100, 65_536, 4 << 20])
def test_set_get_round_trip_byte_exact(redis_server: RedisServer, size: int) -> None:
    with client_for(redis_server) as client:
        value = pattern(size, size)
        client.set("k", value)
        dest = bytearray(b"\xee" * (size + 7))
        assert client.get("k", dest) == size
        assert bytes(dest[:size]) == value
        assert dest[size:] == b"\xee" * 7
        assert redis_py(redis_server).get("k") == value


def test_every_buffer_kind(redis_server: RedisServer, tmp_path) -> None:
    with client_for(redis_server) as client:
        floats = np.arange(1000, dtype=np.float32)
        client.set(b"floats", floats)
        # Length in bytes, not items: all 4000 bytes are stored.
        assert redis_py(redis_server).strlen("floats") == 4000
        out = np.zeros(1000, dtype=np.float32)
        assert client.get(b"floats", out) == 4000
        np.testing.assert_array_equal(out, floats)

        halves = np.zeros((10, 200), dtype=np.float16)
        assert client.get("floats", halves) == 4000
        assert halves.tobytes() == floats.tobytes()

        client.set("mv", memoryview(b"memoryview-bytes"))
        view = memoryview(bytearray(32))
        assert client.get("mv", view) == 16
        assert bytes(view[:16]) == b"memoryview-bytes"

        path = tmp_path / "mapped"
        path.write_bytes(b"\0" * 4096)
        with open(path, "r+b") as f, mmap.mmap(f.fileno(), 4096) as mapped:
            mapped[:5] = b"hello"
            client.set("mm", mapped)
            assert client.get("mm", mapped) == 4096
            client.set("small", b"world")
            assert client.get("small", mapped) == 5
            assert mapped[:5] == b"world"


def test_get_into_read_only_or_non_contiguous_buffer_is_refused_before_any_io(redis_server: RedisServer) -> None:
    with client_for(redis_server) as client:
        client.set("k", b"x" * 100)
        observer = redis_py(redis_server)
        commands_before = observer.info("stats")["total_commands_processed"]
        immutable = bytes(200)
        with pytest.raises(InvalidInputError, match="read-only"):
            client.get("k", immutable)
        assert immutable == bytes(200)
        with pytest.raises(InvalidInputError, match="read-only"):
            client.get("k", memoryview(bytearray(200)).toreadonly())
        with pytest.raises(InvalidInputError, match="contiguous"):
            client.get("k", np.zeros(400, dtype=np.uint8)[::2])
        with pytest.raises(TypeError, match="buffer"):
            client.get("k", "not a buffer")  # type: ignore[arg-type]
        # Only the INFO call itself reached the server in between.
        assert observer.info("stats")["total_commands_processed"] == commands_before + 1


def test_miss_returns_none_and_leaves_buffer_untouched(redis_server: RedisServer) -> None:
    with client_for(redis_server) as client:
        dest = bytearray(b"\x55" * 1024)
        assert client.get("absent", dest) is None
        assert dest == b"\x55" * 1024


def test_value_too_large_raises_and_connection_stays_usable(redis_server: RedisServer) -> None:
    with client_for(redis_server) as client:
        client.set("big", pattern(1 << 20, 1))
        dest = bytearray(4096)
        with pytest.raises(ValueTooLargeError, match="1048576 bytes") as info:
            client.get("big", dest)
        assert isinstance(info.value, ValueError)
        assert dest == bytearray(4096)
        client.set("next", b"still in sync")
        assert client.get("next", dest) == 13
        assert dest[:13] == b"still in sync"


def test_exists_delete_and_key_types(redis_server: RedisServer) -> None:
    with client_for(redis_server) as client:
        binary_key = b"\x00\xff\r\nkey"
        client.set(binary_key, b"v")
        assert redis_py(redis_server).get(binary_key) == b"v"
        assert client.exists(binary_key)
        client.set("ключ", b"unicode")
        assert redis_py(redis_server).get("ключ".encode()) == b"unicode"
        assert client.delete(binary_key) is True
        assert client.delete(binary_key) is False
        assert client.exists(binary_key) is False
        with pytest.raises(TypeError, match="str or bytes"):
            client.exists(42)  # type: ignore[arg-type]


def test_key_lengths(redis_server: RedisServer) -> None:
    with client_for(redis_server) as client:
        for length in (1, 200, 65_536):
            key = b"k" * length
            client.set(key, b"v%d" % length)
            assert redis_py(redis_server).get(key) == b"v%d" % length
        with pytest.raises(InvalidInputError, match="longer than the limit"):
            client.set(b"k" * (256 * 1024 + 1), b"v")


def test_close_and_context_manager(redis_server: RedisServer) -> None:
    with client_for(redis_server) as client:
        client.ping()
    assert client.closed
    with pytest.raises(ClosedError, match="closed"):
        client.ping()
    client.close()  # idempotent


def test_server_down_names_host_and_port(clean_env) -> None:
    port = free_port()
    started = time.monotonic()
    with pytest.raises(RespConnectionError, match=f"127.0.0.1:{port}") as info:
        RedisClient("127.0.0.1", port)
    assert isinstance(info.value, ConnectionError)
    assert time.monotonic() - started < 2


def test_credentials_and_secrets(secure_server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with client_for(secure_server, password="s3cret-default-pw") as client:
        client.ping()
        assert "s3cret" not in repr(client)
        assert "password=***" in repr(client)
        assert "s3cret" not in repr(client.settings)
        assert "s3cret" not in repr(client._native)
    with client_for(secure_server, username="alice", password="s3cret-alice-pw") as client:
        client.set("alice-was-here", b"1")
    failures = []
    for kwargs in ({"password": "wrong-pw-1"}, {"username": "alice", "password": "wrong-pw-2"}, {}):
        with pytest.raises(AuthenticationError) as info:
            client_for(secure_server, **kwargs)
        failures.append(info.value)
    for failure in failures:
        text = f"{failure} {failure!r} {failure.args}"
        assert "wrong-pw" not in text and "s3cret" not in text
    assert "authentication failed" in str(failures[0])
    assert "s3cret" not in caplog.text and "wrong-pw" not in caplog.text


def test_environment_fallbacks(redis_server: RedisServer, clean_env: pytest.MonkeyPatch, secure_server) -> None:
    clean_env.setenv("LMCACHE_RESP_HOST", "127.0.0.1")
    clean_env.setenv("LMCACHE_RESP_PORT", str(redis_server.port))
    with RedisClient() as client:
        client.set("via-env", b"1")
    assert redis_py(redis_server).get("via-env") == b"1"
    clean_env.setenv("LMCACHE_RESP_PORT", str(secure_server.port))
    clean_env.setenv("LMCACHE_RESP_USERNAME", "alice")
    clean_env.setenv("LMCACHE_RESP_PASSWORD", "s3cret-alice-pw")
    with RedisClient() as client:
        client.set("via-env-acl", b"2")
    assert redis_py(secure_server).get("via-env-acl") == b"2"
    # An explicit argument wins over the environment.
    clean_env.setenv("LMCACHE_RESP_PORT", "1")
    clean_env.delenv("LMCACHE_RESP_USERNAME")
    clean_env.delenv("LMCACHE_RESP_PASSWORD")
    with RedisClient(port=redis_server.port) as client:
        client.ping()


def test_urls(redis_server: RedisServer, unix_server: RedisServer, secure_server: RedisServer, clean_env) -> None:
    with RedisClient.from_url(f"resp://127.0.0.1:{redis_server.port}") as client:
        client.set("resp-url", b"a")
    with RedisClient.from_url(f"redis://127.0.0.1:{redis_server.port}/3") as client:
        client.set("db3", b"b")
    assert redis_py(redis_server, db=3).get("db3") == b"b"
    assert redis_py(redis_server, db=0).get("db3") is None
    with RedisClient.from_url(f"unix://{unix_server.unix_path}") as client:
        client.set("unix", pattern(100_000, 3))
    assert redis_py(unix_server).get("unix") == pattern(100_000, 3)
    with RedisClient.from_url(f"redis://alice:s3cret-alice-pw@127.0.0.1:{secure_server.port}/0") as client:
        assert "s3cret" not in repr(client)
        client.ping()
    with pytest.raises(AuthenticationError) as info:
        RedisClient.from_url(f"redis://alice:wrong-pw-3@127.0.0.1:{secure_server.port}")
    assert "wrong-pw" not in str(info.value)


def test_ipv6(redis_server: RedisServer) -> None:
    import socket

    try:
        socket.create_connection(("::1", redis_server.port), timeout=1).close()
    except OSError:
        pytest.skip("no IPv6 loopback on this host")
    with RedisClient("::1", redis_server.port) as client:
        client.set("v6", b"over ipv6")
    with RedisClient.from_url(f"redis://[::1]:{redis_server.port}") as client:
        assert client.exists("v6")


def test_tcp_nodelay(redis_server: RedisServer) -> None:
    with client_for(redis_server) as client:
        assert client._native.tcp_nodelay is True


def test_timeout_bounds_every_call_and_releases_the_gil(redis_server: RedisServer) -> None:
    with client_for(redis_server, timeout=0.5) as client:
        pause(redis_server)
        try:
            with ThreadTicks() as ticks:
                started = time.monotonic()
                with pytest.raises(RespTimeoutError) as info:
                    client.get("k", bytearray(10))
                elapsed = time.monotonic() - started
        finally:
            resume(redis_server)
        assert isinstance(info.value, TimeoutError)
        assert 0.5 <= elapsed < 1.0
        # The other thread ran while the call waited: the GIL was released.
        assert ticks.count > 100
        client.set("after", b"recovered")
        assert redis_py(redis_server).get("after") == b"recovered"


def test_server_restart_then_next_call_reconnects(redis_server: RedisServer) -> None:
    with client_for(redis_server) as client:
        client.set("k", b"v")
        redis_server.restart()
        try:
            client.ping()
        except RespConnectionError:
            client.ping()
        client.set("k2", b"v2")
        assert redis_py(redis_server).get("k2") == b"v2"


def test_server_errors_carry_the_message(redis_server: RedisServer) -> None:
    redis_py(redis_server).lpush("a-list", "x")
    with client_for(redis_server) as client:
        with pytest.raises(ServerError, match="WRONGTYPE") as info:
            client.get("a-list", bytearray(10))
        assert info.value.message.startswith("WRONGTYPE")
        client.ping()


def test_no_sigpipe_when_the_server_vanishes(redis_server: RedisServer) -> None:
    """A process that keeps SIGPIPE's default action must survive writing to a dead server."""
    script = f"""
import signal, sys
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
import lmcache_resp
client = lmcache_resp.RedisClient("127.0.0.1", {redis_server.port}, timeout=2)
client.set("k", b"x")
print("ready", flush=True)
sys.stdin.readline()
for _ in range(20):
    try:
        client.set("k", bytes(8 << 20))
    except lmcache_resp.RespError as exc:
        pass
print("survived", flush=True)
"""
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert child.stdout is not None and child.stdin is not None
    assert child.stdout.readline().strip() == b"ready"
    redis_server.kill()
    child.stdin.write(b"go\n")
    child.stdin.flush()
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, f"exit {child.returncode} (SIGPIPE is -13): {err.decode()}"
    assert b"survived" in out


def test_missing_redis_server_names_the_debian_package(tmp_path) -> None:
    from lmcache_resp_testing import cli

    env = dict(os.environ, PATH="/nonexistent")
    env.pop("REDIS_TEST_SERVER", None)
    result = subprocess.run(
        [*cli.command_line(), "server", str(tmp_path), "12345"], env=cli.environment(env), capture_output=True,
        text=True,
    )
    assert result.returncode == 127
    assert "redis-server" in result.stderr and "apt-get install" in result.stderr


def test_version_is_exposed() -> None:
    assert lmcache_resp.__version__ == "0.1.0"
