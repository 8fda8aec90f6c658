"""The bridge's --metrics endpoint under clients that do not behave (lmcache_resp/_metrics_http.py):
no thread per connection and no memory left behind, a deadline per connection however slowly
its bytes come, a cap on connections that never keeps a real scraper out, a cap on the request
head, and this host only unless every interface is named. The exchange itself (bytes in, the
reply out) is checked without sockets; the rest against real sockets, the flood against a real
bridge process.

No speed is asserted: where a bound is the behaviour (a deadline) its margin is generous, and
"not before the deadline" is measured from before the connect, which the server's clock can
only follow."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import BridgeProcess, RedisServer, free_port
from lmcache_resp import metrics
from lmcache_resp._metrics_http import Exchange, MetricsServer, parse_address

BODY = b"# HELP lmcache_resp_x_total A counter\n# TYPE lmcache_resp_x_total counter\nlmcache_resp_x_total 7\n"


def reply(*chunks: bytes, limit: int = 8192) -> bytes | None:
    exchange = Exchange(lambda: BODY, limit)
    out = None
    for chunk in chunks:
        out = exchange.feed(chunk)
    return out


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    server = MetricsServer("127.0.0.1", 0, lambda: BODY, timeout=1.0, max_connections=4)
    yield server
    server.shutdown()


def connect(server: MetricsServer) -> socket.socket:
    return socket.create_connection(server.server_address, timeout=30)


def read_all(sock: socket.socket) -> bytes:
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


# -- the exchange, without sockets --------------------------------------------------------------


def test_a_scrape_gets_the_text_whole_and_a_head_request_only_its_headers() -> None:
    expected_head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(BODY))
    assert reply(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n") == expected_head + BODY
    assert reply(b"GET /?name[]=x HTTP/1.0\r\n\r\n") == expected_head + BODY
    assert reply(b"HEAD /metrics HTTP/1.1\r\n\r\n") == expected_head
    # A head that arrives a byte at a time is answered once, when it is whole.
    request = b"GET /metrics HTTP/1.1\r\nAccept: */*\r\n\r\n"
    exchange = Exchange(lambda: BODY)
    answers = [exchange.feed(request[i:i + 1]) for i in range(len(request))]
    assert answers[:-1] == [None] * (len(request) - 1)
    assert answers[-1] == expected_head + BODY


def test_other_paths_methods_and_garbage_get_their_status_and_say_why() -> None:
    def status_and_body(out: bytes | None) -> tuple[bytes, bytes]:
        assert out is not None
        head, _, body = out.partition(b"\r\n\r\n")
        assert b"Connection: close" in head and b"Content-Length: %d" % len(body) in head
        return head.split(b"\r\n")[0], body

    assert status_and_body(reply(b"GET /admin HTTP/1.1\r\n\r\n")) == (
        b"HTTP/1.1 404 Not Found", b"404 Not Found: the metrics are at /metrics\n")
    line, body = status_and_body(reply(b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"))
    assert line == b"HTTP/1.1 405 Method Not Allowed"
    assert body == b"405 Method Not Allowed: only GET and HEAD are served\n"
    assert b"Allow: GET, HEAD\r\n" in reply(b"PUT / HTTP/1.1\r\n\r\n")  # type: ignore[operator]
    assert status_and_body(reply(b"\x16\x03\x01 hello\r\n\r\n"))[0] == b"HTTP/1.1 400 Bad Request"
    assert status_and_body(reply(b"GET /metrics\r\n\r\n"))[0] == b"HTTP/1.1 400 Bad Request"

    def broken() -> bytes:
        raise RuntimeError("the bridge is stopping")

    out = Exchange(broken).feed(b"GET /metrics HTTP/1.1\r\n\r\n")
    assert status_and_body(out) == (b"HTTP/1.1 503 Service Unavailable",
                                    b"503 Service Unavailable: cannot read the counters: the bridge is stopping\n")


def test_a_head_past_the_limit_is_refused_whether_or_not_it_ends() -> None:
    too_large = b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    endless = b"GET /metrics HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 200
    assert reply(endless, limit=128).startswith(too_large)  # type: ignore[union-attr]
    # Ended, but past the limit (one feed carries it all).
    assert reply(endless + b"\r\n\r\n", limit=128).startswith(too_large)  # type: ignore[union-attr]
    # At the limit it is served; a byte past it is not.
    request = b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * 94 + b"\r\n\r\n"
    assert len(request) == 128
    assert reply(request, limit=128).startswith(b"HTTP/1.1 200 OK\r\n")  # type: ignore[union-attr]
    assert reply(request.replace(b": ", b":  "), limit=128).startswith(too_large)  # type: ignore[union-attr]


# -- where it listens ---------------------------------------------------------------------------


def test_a_port_alone_binds_this_host_only_and_every_interface_must_be_named() -> None:
    assert parse_address("9464") == ("127.0.0.1", 9464)
    assert parse_address("0.0.0.0:9464") == ("0.0.0.0", 9464)
    assert parse_address("[::1]:0") == ("::1", 0)
    assert parse_address("localhost:80") == ("localhost", 80)
    # ':9464' once meant every interface: now it is refused, naming both choices.
    with pytest.raises(ValueError, match=r"give PORT or 127\.0\.0\.1:PORT for this host only, 0\.0\.0\.0:9464 for "
                                         r"every interface"):
        parse_address(":9464")
    with pytest.raises(ValueError, match="the port must be a number from 0 to 65535"):
        parse_address("127.0.0.1:http")
    with pytest.raises(ValueError, match="the port must be a number"):
        parse_address("70000")
    server = metrics.serve("0", lambda: [])
    try:
        assert server.server_address[0] == "127.0.0.1"
        with socket.create_connection(server.server_address, timeout=30) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            assert read_all(sock) == (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                                      b"Content-Length: 1\r\nConnection: close\r\n\r\n\n")
    finally:
        server.shutdown()


def test_the_bridge_help_says_port_alone_is_this_host_and_what_every_interface_means(
        capsys: pytest.CaptureFixture[str]) -> None:
    from lmcache_resp.bridge import main

    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--metrics [ADDR:]PORT" in text
    assert "PORT alone binds 127.0.0.1 (this host only), 0.0.0.0:PORT binds every interface" in text
    assert "':9464' for every interface" not in text


# -- bounds, against real sockets ---------------------------------------------------------------


def test_a_silent_client_is_cut_off_at_the_timeout(server: MetricsServer) -> None:
    started = time.monotonic()
    with connect(server) as sock:
        assert read_all(sock) == b"", "nothing is sent to a client that asked nothing"
    took = time.monotonic() - started
    assert 1.0 <= took < 15.0, f"cut off after {took:.2f} s (timeout 1 s)"
    wait_until(lambda: server.open_connections == 0, "the connection is gone on the server's side too")


def test_a_client_trickling_its_request_is_cut_off_at_its_deadline_not_per_byte(server: MetricsServer) -> None:
    # A byte every 0.2 s never leaves the socket idle for the timeout (1 s): only a deadline
    # for the whole request stops it. The trickle would go on for 30 s.
    request = b"GET /metrics HTTP/1.1\r\n" + b"X-Slow: " + b"a" * 150
    started = time.monotonic()
    with connect(server) as sock:
        cut = False
        for byte in request:
            try:
                sock.sendall(bytes([byte]))
                time.sleep(0.2)
            except (BrokenPipeError, ConnectionResetError):
                cut = True
                break
            if time.monotonic() - started > 2.0:
                sock.settimeout(10)
                try:
                    cut = sock.recv(1) == b""
                except ConnectionResetError:
                    cut = True
                break
    took = time.monotonic() - started
    assert cut, "the trickling client was still being read"
    assert took < 15.0, f"cut off after {took:.2f} s"


def test_an_oversized_header_is_refused_with_431_and_the_connection_closed() -> None:
    server = metrics.serve("127.0.0.1:0", lambda: [])
    try:
        with socket.create_connection(server.server_address, timeout=30) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\n" + b"X-Pad: " + b"a" * (16 * 1024) + b"\r\n\r\n")
            body = b"431 Request Header Fields Too Large: the request line and headers exceed 8192 bytes\n"
            assert read_all(sock) == (
                b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body
            )
    finally:
        server.shutdown()


def test_past_the_cap_the_oldest_connections_close_at_once_and_a_scrape_still_gets_in(server: MetricsServer) -> None:
    # The fixture's cap is 4 and its timeout 1 s: a longer timeout here, so that only the cap closes.
    server.shutdown()
    server = MetricsServer("127.0.0.1", 0, lambda: BODY, timeout=60.0, max_connections=4)
    try:
        socks = []
        for _ in range(10):
            socks.append(connect(server))
            wait_until(lambda: server.open_connections == min(len(socks), 4), "each connection accepted in turn")
        for sock in socks[:6]:
            assert read_all(sock) == b"", "an older connection past the cap is closed"
        for sock in socks[6:]:
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
        # (The newest is counted a moment after the oldest was closed for it.)
        wait_until(lambda: server.open_connections == 4, "four connections stay open")
        with connect(server) as scraper:
            scraper.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            assert read_all(scraper).endswith(b"\r\n\r\n" + BODY)
        for sock in socks:
            sock.close()
        wait_until(lambda: server.open_connections == 0, "closed connections leave the server")
    finally:
        server.shutdown()


class ServerProcess:
    """A MetricsServer with its defaults in a process of its own (serving ``up 1``), so that
    its CPU and memory are its own and a flood from this process does not share its GIL;
    ``prelude`` runs before it starts."""

    def __init__(self, tmp_path: Path, prelude: str = "") -> None:
        script = tmp_path / "server.py"
        script.write_text(
            "import resource, sys\n"
            "from lmcache_resp._metrics_http import MetricsServer\n"
            f"{prelude}\n"
            "server = MetricsServer('127.0.0.1', 0, lambda: b'up 1\\n')\n"
            "print(server.server_address[1], flush=True)\n"
            "sys.stdin.read()\n"
        )
        self.log = tmp_path / "server.log"
        self.child = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self.log.open("w"), text=True)
        assert self.child.stdout is not None
        self.port = int(self.child.stdout.readline())

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.child.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_kib(self) -> int:
        return proc_status(self.child.pid)["VmRSS"]

    def scrape(self, timeout: float = 30) -> bytes:
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            return read_all(sock)

    def stop(self) -> None:
        self.child.kill()
        self.child.communicate(timeout=30)


@pytest.fixture
def server_process(tmp_path: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(tmp_path)
    yield process
    process.stop()


def test_out_of_descriptors_it_pauses_accepting_instead_of_spinning_and_recovers(tmp_path: Path) -> None:
    # A server with room for about 20 connections; 60 connect.
    process = ServerProcess(
        tmp_path, "resource.setrlimit(resource.RLIMIT_NOFILE, (40, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))")
    try:
        flood = [socket.create_connection(("127.0.0.1", process.port), timeout=30) for _ in range(60)]
        time.sleep(0.5)
        cpu = process.cpu_seconds()
        time.sleep(3.0)
        spent = process.cpu_seconds() - cpu
        assert spent < 0.3, f"the server used {spent:.2f} s of CPU in 3 s at its descriptor limit"
        for sock in flood:
            sock.close()
        # Once the flood is gone a scrape gets through (the backlog's dead connections first).
        deadline = time.monotonic() + 30
        while True:
            try:
                if process.scrape().endswith(b"\r\n\r\nup 1\n"):
                    break
            except ConnectionResetError:
                pass
            assert time.monotonic() < deadline, "no scrape got through after the flood"
            time.sleep(0.2)
    finally:
        process.stop()
    err = process.log.read_text()
    pauses = err.count("cannot accept a connection")
    assert 1 <= pauses <= 20, err
    assert "Too many open files" in err and "accepting again in 0.5 s" in err, err


_SLOWLORIS = """
import selectors, socket, sys, threading, time

port, count = int(sys.argv[1]), int(sys.argv[2])
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
chosen = selectors.DefaultSelector()
reconnects = 0

def connect():
    sock = socket.socket()
    sock.setblocking(False)
    try:
        sock.connect(("127.0.0.1", port))
    except (BlockingIOError, OSError):
        pass
    chosen.register(sock, selectors.EVENT_READ)

for _ in range(count):
    connect()
print("ready", flush=True)
trickled = time.monotonic()
while not stop.is_set():
    for key, _ in chosen.select(0.05):
        sock = key.fileobj
        try:
            data = sock.recv(4096)
        except OSError:
            data = b""
        if not data:
            chosen.unregister(sock)
            sock.close()
            reconnects += 1
            connect()
    if time.monotonic() - trickled >= 1.0:
        trickled = time.monotonic()
        for key in list(chosen.get_map().values()):
            try:
                key.fileobj.send(b"G")
            except OSError:
                pass
print(reconnects, flush=True)
"""


class Slowloris:
    """``count`` clients that each send a byte of a request a second and never finish it, and
    reconnect at once whenever the server closes them (the worst for a server that closes its
    oldest connection to make room: each close brings a new connection). They run in a process
    of their own, as a flood and a scraper would: in this one, the flood's thread held the GIL
    for up to a switch interval (5 ms) between a scraper's connect and its request, long enough
    for the flood's churn to push the scraper out before it had asked anything (seen on a
    loaded machine: the scrape closed unanswered)."""

    def __init__(self, port: int, count: int) -> None:
        self.reconnects = 0
        self._child = subprocess.Popen([sys.executable, "-c", _SLOWLORIS, str(port), str(count)],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._child.stdout is not None
        assert self._child.stdout.readline() == "ready\n", "the flood did not start"

    def stop(self) -> None:
        out, _ = self._child.communicate(input="", timeout=30)
        self.reconnects = int(out.split()[-1])


@pytest.mark.parametrize("clients", [64, 256])
def test_slow_clients_that_reconnect_at_once_never_keep_a_scrape_out(server_process: ServerProcess,
                                                                     clients: int) -> None:
    # 64: as many as the server keeps open; 256: past it, the oldest is closed for each new
    # one, which reconnects at once (tens of thousands of connections a second here). Before
    # the server read each newcomer at once, took a bounded number of them per turn and kept
    # a backlog for such a flood, about one scrape in four was closed unanswered (the
    # connections accepted after it pushed it out before its request was read) or waited
    # for its SYN to be sent again.
    flood = Slowloris(server_process.port, clients)
    try:
        time.sleep(1.0)
        took: list[float] = []
        for _ in range(24):
            started = time.monotonic()
            assert server_process.scrape(timeout=10).endswith(b"\r\n\r\nup 1\n"), f"scrape {len(took)}"
            took.append(time.monotonic() - started)
            time.sleep(0.25)
    finally:
        flood.stop()
    # Prometheus's scrape timeout is 10 s; a scrape here is answered at once, give or take a
    # loaded machine (a SYN sent again costs 1 s).
    assert max(took) < 5.0, f"the slowest scrape took {max(took):.2f} s ({flood.reconnects} reconnects)"
    if clients > 64:
        assert flood.reconnects > 1000, "the flood did not churn: it tested nothing"


def test_a_request_line_of_megabytes_and_a_header_flood_get_431_and_cost_no_memory(
        server_process: ServerProcess) -> None:
    body = b"431 Request Header Fields Too Large: the request line and headers exceed 8192 bytes\n"
    too_large = (b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\n"
                 b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
    baseline = server_process.rss_kib()
    floods = {
        "a request line of 8 MiB": b"GET /" + b"a" * (8 << 20),
        "200,000 headers": b"GET /metrics HTTP/1.1\r\n" + b"X-A: b\r\n" * 200_000,
    }
    for what, flood in floods.items():
        with socket.create_connection(("127.0.0.1", server_process.port), timeout=30) as sock:
            got = bytearray()
            reader = threading.Thread(target=lambda: got.extend(read_until_closed(sock)))
            reader.start()
            try:
                sock.sendall(flood)
            except (BrokenPipeError, ConnectionResetError):
                pass  # refused long before the end: the server closed
            reader.join(30)
        assert bytes(got) == too_large, f"{what}: {bytes(got[:200])!r}"
        grew = (server_process.rss_kib() - baseline) / 1024
        assert grew < 4, f"{what}: the server grew by {grew:.1f} MiB"
    assert server_process.scrape().endswith(b"\r\n\r\nup 1\n")


def read_until_closed(sock: socket.socket) -> bytes:
    """What arrives until the peer closes or resets (a reset after the reply keeps the reply)."""
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass
    return out


# -- the bridge under a flood -------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("Threads", "VmRSS"):
            fields[name] = int(value.split()[0])
    return fields


def listening_on(port: int) -> list[str]:
    """The local addresses of the sockets listening on ``port`` on this host (the kernel's
    own table: what an outside client could reach)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, port_hex = local.partition(":")
            if state == "0A" and int(port_hex, 16) == port:  # 0A: LISTEN
                raw = bytes.fromhex(address)
                # The kernel writes each 32-bit word in host (little-endian) order.
                words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                family = socket.AF_INET if len(raw) == 4 else socket.AF_INET6
                found.append(socket.inet_ntop(family, words))
    return found


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        assert response.status == 200
        return response.read().decode()


def test_200_slow_clients_cost_the_bridge_no_thread_and_no_memory_and_a_scrape_still_gets_through(
        redis_server: RedisServer, tmp_path: Path) -> None:
    port = free_port()
    process = BridgeProcess(f"redis://127.0.0.1:{redis_server.port}", tmp_path / "bridge.sock", "--metrics", str(port))
    try:
        assert process.process is not None
        pid = process.process.pid
        wait_until(lambda: f"bridge: metrics at http://127.0.0.1:{port}/metrics" in process.log.read_text(),
                   "the bridge logs where its metrics are")
        # --metrics PORT: this host only, by the kernel's own table, not only by the log line.
        assert listening_on(port) == ["127.0.0.1"]
        assert "lmcache_resp_in_flight{" in scrape(port)
        baseline = proc_status(pid)
        flood = []
        for i in range(200):
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            if i % 2:
                sock.sendall(b"GET /metr")  # a request begun and never finished
            flood.append(sock)
        during = proc_status(pid)
        text = scrape(port)
        assert re.search(r"^lmcache_resp_endpoint_up\{endpoint=\"127\.0\.0\.1:\d+\"\} 1$", text, re.M), text
        after_scrape = proc_status(pid)
        for sock in flood:
            sock.close()
        time.sleep(1.0)
        after = proc_status(pid)
    finally:
        process.stop()
    for name, status in (("during the flood", during), ("at the scrape", after_scrape), ("after it", after)):
        # No thread per connection (two spare for whatever else the bridge may start meanwhile).
        assert status["Threads"] <= baseline["Threads"] + 2, f"{name}: {status['Threads']} threads, {baseline} before"
        grew = (status["VmRSS"] - baseline["VmRSS"]) / 1024
        assert grew < 16, f"{name}: the bridge grew by {grew:.1f} MiB"
