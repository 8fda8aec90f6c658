"""The HTTP side of the bridge's ``--metrics``: one thread, one selector, every connection
bounded, whoever connects.

A scrape is one short exchange: a ``GET /metrics`` of a few hundred bytes, a reply of a few
kilobytes, then the connection closes. Everything else a peer may do is bounded here rather
than served with a thread (``http.server``'s way, where 200 silent clients cost 200 threads
and their memory for as long as they stay):

- **a deadline per connection** (``timeout``, from its accept): reading the request, writing
  the reply and the lingering close all end by then, however slowly the peer trickles bytes;
- **a cap on connections** (``max_connections``): when it is reached, the connection that has
  waited longest is closed at once to make room (one whose reply is being written last), so a
  flood of idle connections cannot keep a real scraper out: its request arrives with its
  connect and is read and answered as it is accepted. Clients that reconnect as soon as they
  are closed make a churn of tens of thousands of connections a second; the server then takes
  at most a quarter of the cap per turn, each read at once, so a scraper is answered before
  the connections after it could push it out, and its listen backlog (1024) keeps their
  connects from filling the queue and dropping a scraper's SYN;
- **a cap on the request head** (``max_head_bytes``): a longer request line and headers get
  ``431`` and the connection closes;
- only ``GET`` and ``HEAD`` of ``/metrics`` (and ``/``); one request per connection.

:class:`Exchange` is the protocol, pure (bytes in, the reply out) and tested without sockets;
:class:`MetricsServer` moves the bytes. Binding is the caller's choice: :func:`parse_address`
reads ``PORT`` as ``127.0.0.1:PORT`` and binds every interface only when told ``0.0.0.0``
(IPv6: ``[::]``).
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from http import HTTPStatus

__all__ = ["DEFAULT_HOST", "Exchange", "MetricsServer", "parse_address"]

logger = logging.getLogger("lmcache_resp.metrics")

DEFAULT_HOST = "127.0.0.1"
#: Seconds a connection has, from its accept, to send its request and take the whole reply.
TIMEOUT = 10.0
#: Connections open at once; past it the oldest is closed.
MAX_CONNECTIONS = 64
#: Bytes of request line and headers accepted.
MAX_HEAD_BYTES = 8192
#: Bytes read and thrown away after the reply (so that the peer reads it before the close,
#: rather than a reset), before the connection is closed anyway.
MAX_DRAIN_BYTES = 64 * 1024
#: Connects queued before the server accepts them: room for a flood of reconnecting clients
#: (at 128 a flood of 256 filled it and scrapers' SYNs were dropped and sent again 1-3 s later).
BACKLOG = 1024
#: After accept() fails (out of descriptors), accepting pauses this long rather than spin.
ACCEPT_PAUSE = 0.5
_RECV = 4096
_PATHS = ("/", "/metrics")
_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def parse_address(text: str) -> tuple[str, int]:
    """``PORT`` (this host only: ``127.0.0.1``), ``HOST:PORT`` or ``[IPv6]:PORT``. Every
    interface is bound only when named: ``0.0.0.0:PORT`` (IPv6: ``[::]:PORT``)."""
    host, colon, port_text = text.rpartition(":")
    if not colon:
        host = DEFAULT_HOST
    elif not host:
        raise ValueError(
            f"{text!r} names no address: give PORT or 127.0.0.1:PORT for this host only, "
            f"0.0.0.0:{port_text or 'PORT'} for every interface"
        )
    host = host.removeprefix("[").removesuffix("]")
    if not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"{text!r}: the port must be a number from 0 to 65535 (0 picks a free one)")
    return host, int(port_text)


def _reply(status: HTTPStatus, body: bytes, *, head_only: bool = False, extra: str = "") -> bytes:
    content_type = _CONTENT_TYPE if status == HTTPStatus.OK else "text/plain; charset=utf-8"
    head = (
        f"HTTP/1.1 {status.value} {status.phrase}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"{extra}"
        "Connection: close\r\n\r\n"
    ).encode("ascii")
    return head if head_only else head + body


def _error(status: HTTPStatus, why: str, *, extra: str = "") -> bytes:
    return _reply(status, f"{status.value} {status.phrase}: {why}\n".encode(), extra=extra)


class Exchange:
    """One connection's request and reply, without I/O: :meth:`feed` takes what arrived and
    returns the whole reply once it is decided (``None`` while the head is incomplete)."""

    def __init__(self, render: Callable[[], bytes], max_head_bytes: int = MAX_HEAD_BYTES) -> None:
        self._render = render
        self._limit = max_head_bytes
        self._head = bytearray()

    def feed(self, data: bytes) -> bytes | None:
        self._head += data
        end = self._head.find(b"\r\n\r\n")
        if end < 0 and len(self._head) <= self._limit:
            return None
        if end < 0 or end + 4 > self._limit:
            self._head.clear()
            return _error(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, f"the request line and headers exceed {self._limit} bytes"
            )
        head = bytes(self._head[:end])
        self._head.clear()
        return self._answer(head)

    def _answer(self, head: bytes) -> bytes:
        request_line = head.split(b"\r\n", 1)[0]
        parts = request_line.split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            return _error(HTTPStatus.BAD_REQUEST, "expected a request line like GET /metrics HTTP/1.1")
        method, target = parts[0], parts[1].split(b"?", 1)[0]
        if method not in (b"GET", b"HEAD"):
            return _error(HTTPStatus.METHOD_NOT_ALLOWED, "only GET and HEAD are served", extra="Allow: GET, HEAD\r\n")
        if target.decode("latin-1") not in _PATHS:
            return _error(HTTPStatus.NOT_FOUND, "the metrics are at /metrics")
        try:
            body = self._render()
        except Exception as exc:  # the engine stopped, or failed: say so, keep serving
            logger.warning("metrics: cannot read the counters: %s", exc)
            return _error(HTTPStatus.SERVICE_UNAVAILABLE, f"cannot read the counters: {exc}")
        return _reply(HTTPStatus.OK, body, head_only=method == b"HEAD")


class _Conn:
    __slots__ = ("accepted", "deadline", "drained", "exchange", "outbox", "sock")

    def __init__(self, sock: socket.socket, exchange: Exchange, now: float, timeout: float) -> None:
        self.sock = sock
        self.exchange = exchange
        self.accepted = now
        self.deadline = now + timeout
        self.outbox: memoryview | None = None
        self.drained = 0


class MetricsServer:
    """Serves ``render()`` (Prometheus text) at ``http://host:port/metrics`` from one daemon
    thread; see the module documentation for the bounds. ``port`` 0 picks a free port
    (:attr:`server_address` names it). :meth:`shutdown` stops the thread and closes every
    connection."""

    def __init__(
        self,
        host: str,
        port: int,
        render: Callable[[], bytes],
        *,
        timeout: float = TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
        max_head_bytes: int = MAX_HEAD_BYTES,
    ) -> None:
        if timeout <= 0 or max_connections < 1 or max_head_bytes < 64:
            raise ValueError("timeout must be > 0, max_connections >= 1 and max_head_bytes >= 64")
        self._render = render
        self._timeout = timeout
        self._max_connections = max_connections
        self._max_head_bytes = max_head_bytes
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        self._listener = socket.create_server((host, port), family=family, backlog=BACKLOG)
        self._listener.setblocking(False)
        self.server_address: tuple[str, int] = self._listener.getsockname()[:2]
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._conns: dict[int, _Conn] = {}
        self._accept_paused_until: float | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="lmcache-resp-metrics", daemon=True)
        self._thread.start()

    @property
    def open_connections(self) -> int:
        """Connections open now (read without a lock: for diagnostics and tests)."""
        return len(self._conns)

    def shutdown(self) -> None:
        """Stops serving: the thread ends and every socket closes. Safe to call again."""
        self._stopping = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._thread.join(5.0)

    # -- the loop -------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stopping:
                now = time.monotonic()
                self._expire(now)
                if self._accept_paused_until is not None and self._accept_paused_until <= now:
                    self._accept_paused_until = None
                    self._selector.register(self._listener, selectors.EVENT_READ, None)
                wakes = [c.deadline for c in self._conns.values()]
                if self._accept_paused_until is not None:
                    wakes.append(self._accept_paused_until)
                wait = max(min(wakes) - now, 0.0) if wakes else None
                for key, _ in self._selector.select(wait):
                    if key.fileobj is self._listener:
                        self._accept()
                    elif key.fileobj is self._wake_r:
                        self._drain_wake()
                    else:
                        self._on_ready(key.data)
        except Exception:  # a bug here must not take the bridge down; say so once
            logger.exception("metrics: the server stopped")
        finally:
            for conn in list(self._conns.values()):
                self._close(conn)
            self._selector.close()
            for sock in (self._listener, self._wake_r, self._wake_w):
                sock.close()

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(64):
                pass
        except BlockingIOError:
            pass

    def _expire(self, now: float) -> None:
        for conn in [c for c in self._conns.values() if c.deadline <= now]:
            self._close(conn)

    def _accept(self) -> None:
        # At most a quarter of the cap per turn, each newcomer read at once: a scraper's request
        # comes with its connect and is answered here, before the connections accepted after it
        # could push it out. Under a flood of reconnecting clients, taking the whole backlog in
        # one turn let them close a scraper before its request was ever read.
        for _ in range(max(1, self._max_connections // 4)):
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors: pause, or the listener would spin
                logger.warning("metrics: cannot accept a connection (%s); accepting again in %.1f s", exc, ACCEPT_PAUSE)
                self._selector.unregister(self._listener)
                self._accept_paused_until = time.monotonic() + ACCEPT_PAUSE
                return
            if len(self._conns) >= self._max_connections:
                self._close(self._victim())
            sock.setblocking(False)
            conn = _Conn(sock, Exchange(self._render, self._max_head_bytes), time.monotonic(), self._timeout)
            self._conns[sock.fileno()] = conn
            self._selector.register(sock, selectors.EVENT_READ, conn)
            self._on_ready(conn)

    def _victim(self) -> _Conn:
        """Room for a newcomer: the connection that has waited longest, but not one whose reply
        is being written while another is not (a scraper reading its reply is not cut off by
        clients that never finish a request)."""
        return min(self._conns.values(), key=lambda c: (c.outbox is not None and c.outbox.nbytes > 0, c.accepted))

    def _on_ready(self, conn: _Conn) -> None:
        if self._conns.get(conn.sock.fileno()) is not conn:
            return  # closed earlier in this round (evicted)
        if conn.outbox is not None and conn.outbox.nbytes:
            self._write(conn)
            return
        try:
            data = conn.sock.recv(_RECV)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        if not data:
            self._close(conn)
            return
        if conn.outbox is not None:  # replied: what still comes is thrown away
            conn.drained += len(data)
            if conn.drained > MAX_DRAIN_BYTES:
                self._close(conn)
            return
        reply = conn.exchange.feed(data)
        if reply is not None:
            conn.outbox = memoryview(reply)
            self._write(conn)

    def _write(self, conn: _Conn) -> None:
        assert conn.outbox is not None
        try:
            sent = conn.sock.send(conn.outbox)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._close(conn)
            return
        conn.outbox = conn.outbox[sent:]
        if conn.outbox.nbytes:
            self._selector.modify(conn.sock, selectors.EVENT_WRITE, conn)
            return
        # All sent: half-close and read until the peer closes (or the deadline), so that it
        # reads the reply rather than a reset caused by bytes it sent that were never read.
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        self._selector.modify(conn.sock, selectors.EVENT_READ, conn)

    def _close(self, conn: _Conn) -> None:
        fd = conn.sock.fileno()
        if self._conns.pop(fd, None) is None:
            return
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()
