"""Memory we send from goes back to its owner only once no kernel operation reads it, whatever
front lent it (#42): an arena page (``PagedRespStore``), a caller's buffer (``RedisClient``)
and a registered region (SGLang's host pool, vLLM's CPU rows), on both I/O loops.

The server here is a small proxy in this file, not a mock of Redis: it plays what no real Redis
does on demand, answering a SET with ``+OK`` as soon as it has read the value's length line and
then reading the value slowly (the reviewer's case). The caller rewrites its memory the moment
the call returns; every byte the proxy received must be what the memory held before.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pytest

from lmcache_resp import BatchError, PagedRespStore, ProtocolError, RedisClient, RespSettings, _native

VALUE = 8 << 20


@dataclass
class Proxy:
    port: int
    received: bytearray = field(default_factory=bytearray)
    sets: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def value_bytes(self) -> bytes:
        with self.lock:
            return bytes(self.received)


def _command_end(buf: bytes) -> int | None:
    """Where the first whole command (an array of bulk strings) of ``buf`` ends."""
    lines = buf.split(b"\r\n")
    if len(lines) < 2 or not lines[0].startswith(b"*"):
        return None
    args = int(lines[0][1:])
    if len(lines) < 2 + 2 * args:
        return None
    return sum(len(line) + 2 for line in lines[: 1 + 2 * args])


def _serve(conn: socket.socket, proxy: Proxy) -> None:
    buf = b""
    with conn:
        while True:
            if b"SET" in buf[:40]:
                lines = buf.split(b"\r\n", 6)
                if len(lines) == 7:
                    conn.sendall(b"+OK\r\n")
                    with proxy.lock:
                        proxy.sets += 1
                        proxy.received += lines[6]
                    break
            elif (end := _command_end(buf)) is not None:
                # A whole handshake command: HELLO is refused as by a server before Redis 6.
                command, buf = buf[:end], buf[end:]
                conn.sendall(b"-ERR unknown command 'HELLO'\r\n" if b"HELLO" in command else b"+PONG\r\n")
                continue
            chunk = conn.recv(65536)
            if not chunk:
                return
            buf += chunk
        # 64 KiB every 4 ms: about 16 MB/s, until the client hangs up.
        while True:
            time.sleep(0.004)
            try:
                chunk = conn.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            with proxy.lock:
                proxy.received += chunk


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    listener = socket.create_server(("127.0.0.1", 0))
    proxy = Proxy(listener.getsockname()[1])

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=_serve, args=(conn, proxy), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield proxy
    listener.close()


def settings(proxy: Proxy, backend: str) -> RespSettings:
    return RespSettings.resolve(
        host="127.0.0.1", port=proxy.port, num_workers=1, timeout=10, io_backend=backend, env={}
    )


def assert_only_what_it_held(proxy: Proxy, original: bytes) -> None:
    # The connection is gone: give the proxy time to read what the socket still held.
    time.sleep(0.8)
    got = proxy.value_bytes()
    assert 0 < len(got) < len(original), len(got)
    wrong = sum(1 for a, b in zip(got, original) if a != b) if got != original[: len(got)] else 0
    assert got == original[: len(got)], f"{wrong} of {len(got)} bytes the proxy got were written after the call returned"


def pattern_bytes(seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 255, VALUE, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("backend", ["poll", "uring"])
def test_a_page_of_the_store(proxy: Proxy, backend: str) -> None:
    original = pattern_bytes(1)
    with PagedRespStore(settings=settings(proxy, backend), page_size=VALUE, num_pages=1) as store:
        page = store.allocate()
        assert page is not None
        memoryview(page)[:] = original
        with pytest.raises(BatchError) as raised:
            store.put(["early"], [page])
        memoryview(page)[:] = b"\xee" * VALUE
        error = raised.value.errors[0]
        assert isinstance(error, ProtocolError) and "before it has read the whole request" in str(error), error
        assert_only_what_it_held(proxy, original)


def test_a_buffer_of_redis_client(proxy: Proxy) -> None:
    # RedisClient drives its one connection by poll (it has no io_backend); the rule holds there.
    original = pattern_bytes(2)
    buffer = bytearray(original)
    client = RedisClient("127.0.0.1", proxy.port, timeout=10)
    with pytest.raises(ProtocolError, match=r"answered SET .* before it has read the whole request"):
        client.set("early", buffer)
    buffer[:] = b"\xee" * VALUE
    client.close()
    assert_only_what_it_held(proxy, original)


@pytest.mark.parametrize("backend", ["poll", "uring"])
def test_a_registered_region(proxy: Proxy, backend: str) -> None:
    original = pattern_bytes(3)
    pool = np.frombuffer(bytearray(original), dtype=np.uint8).copy()
    connector = _native.Connector(settings(proxy, backend))
    region = connector.register_region(pool)
    result = connector.run_ranges("set", region, ["early"], np.array([(0, VALUE)], dtype=np.uint64))
    assert result.hits == [False]
    assert "before it has read the whole request" in str(result.failures[0][1]), result.failures
    pool[:] = 0xEE
    connector.unregister_region(region)
    connector.close()
    assert_only_what_it_held(proxy, original)
