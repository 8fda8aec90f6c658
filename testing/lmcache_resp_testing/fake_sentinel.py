"""A Sentinel that lies or misbehaves, and a listener that is not Redis: the hostile peers of
the Sentinel tests (py-tests/test_sentinel_hostile.py), which no real Sentinel can play.

FakeSentinel answers the few commands a client sends a Sentinel (AUTH, HELLO, PING, SENTINEL
get-master-addr-by-name / replicas, SUBSCRIBE +switch-master) on a port of its own, and names
whatever address the test says (``names``: an address, or a function returning one, asked at
each question). Its ``behaviour`` decides how it answers the question: ``"answer"``; ``"slow"``
(after ``delay`` seconds); ``"silent"`` (it accepts and never says anything, not even PONG);
``"huge"`` (an array that goes on for ``huge_bytes``); ``"malformed"`` (the bytes of
``malformed``). It counts connections (``accepts``), keeps every command it got, and sends
``+switch-master`` to its subscribers on demand (``switch_master``) or as a flood
(``flood``). It is not a mock of Redis: the tests run it beside real Sentinels, to be the one
that lies.

NotRedis accepts, keeps what it received, and answers like a web server.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

__all__ = ["FakeSentinel", "NotRedis"]

Address = tuple[str, int]

# The huge reply is sent in chunks of this many bytes, each built once.
_CHUNK = 256 * 1024


def _encode(*parts: bytes | int | list[bytes] | None) -> bytes:
    """A RESP2 reply: bytes as a bulk string, an int as an integer, a list as an array of
    bulk strings, None as a nil bulk string."""
    out = b""
    for part in parts:
        if part is None:
            out += b"$-1\r\n"
        elif isinstance(part, int):
            out += b":%d\r\n" % part
        elif isinstance(part, list):
            out += b"*%d\r\n" % len(part) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in part)
        else:
            out += b"$%d\r\n%s\r\n" % (len(part), part)
    return out


def _commands(buffer: bytearray) -> list[list[bytes]]:
    """The whole commands (arrays of bulk strings) at the front of ``buffer``, taken out of it."""
    found: list[list[bytes]] = []
    while True:
        at = 0
        try:
            end = buffer.index(b"\r\n", at)
            count = int(buffer[1:end])
            at = end + 2
            args: list[bytes] = []
            for _ in range(count):
                end = buffer.index(b"\r\n", at)
                length = int(buffer[at + 1:end])
                at = end + 2
                if len(buffer) < at + length + 2:
                    return found
                args.append(bytes(buffer[at:at + length]))
                at += length + 2
        except ValueError:  # no CRLF yet
            return found
        del buffer[:at]
        found.append(args)


class _Listener:
    """A TCP listener on 127.0.0.1 that serves each connection on a thread of its own."""

    def __init__(self) -> None:
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        self.lock = threading.Lock()
        self.accepts: list[float] = []
        self._open: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def accepted_since(self, since: float) -> int:
        """Connections accepted at or after ``since`` (time.monotonic())."""
        with self.lock:
            return sum(1 for at in self.accepts if at >= since)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._socket.accept()
            except OSError:
                return
            with self.lock:
                if self._closed:
                    conn.close()
                    return
                self.accepts.append(time.monotonic())
                self._open.append(conn)
            threading.Thread(target=self._serve_safely, args=(conn,), daemon=True).start()

    def _serve_safely(self, conn: socket.socket) -> None:
        try:
            self.serve(conn)
        except OSError:
            pass
        finally:
            conn.close()

    def serve(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        with self.lock:
            self._closed = True
            conns, self._open = self._open, []
        self._socket.close()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()

    def __enter__(self) -> _Listener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FakeSentinel(_Listener):
    """See the module documentation."""

    def __init__(self, names: Address | Callable[[], Address], *, service: str = "mymaster",
                 password: str | None = None) -> None:
        self.names = names
        self.service = service.encode()
        self.password = password
        self.behaviour = "answer"
        self.delay = 0.0
        self.huge_bytes = 300 << 20
        self.malformed = b"*2\r\n$9\r\n127.0.0.1\r\n:not-a-number\r\n"
        self.commands: list[list[bytes]] = []
        self.subscribers: list[socket.socket] = []
        self.huge_sent = 0
        super().__init__()

    def questions(self) -> int:
        """How many times it was asked for the primary."""
        with self.lock:
            return sum(1 for c in self.commands if c[:2] == [b"SENTINEL", b"get-master-addr-by-name"])

    def serve(self, conn: socket.socket) -> None:
        buffer = bytearray()
        while True:
            data = conn.recv(65536)
            if not data:
                return
            if self.behaviour == "silent":
                continue
            buffer += data
            for args in _commands(buffer):
                with self.lock:
                    self.commands.append(args)
                if not self._answer(conn, args):
                    return

    def _answer(self, conn: socket.socket, args: list[bytes]) -> bool:
        """Answers one command; False to hang up."""
        name = args[0].upper() if args else b""
        if name == b"AUTH":
            right = self.password is None or args[-1] == self.password.encode()
            conn.sendall(b"+OK\r\n" if right else b"-WRONGPASS invalid username-password pair\r\n")
        elif name == b"HELLO":
            conn.sendall(b"-ERR unknown command 'HELLO'\r\n")
        elif name == b"PING":
            conn.sendall(b"+PONG\r\n")
        elif name == b"SUBSCRIBE":
            conn.sendall(b"*3\r\n" + _encode(b"subscribe", args[1], 1))
            with self.lock:
                self.subscribers.append(conn)
        elif name == b"SENTINEL" and len(args) == 3 and args[1].lower() == b"get-master-addr-by-name":
            return self._name_the_primary(conn, args[2])
        elif name == b"SENTINEL" and len(args) == 3 and args[1].lower() in (b"replicas", b"slaves"):
            conn.sendall(b"*0\r\n")
        else:
            conn.sendall(b"-ERR unknown command\r\n")
        return True

    def _name_the_primary(self, conn: socket.socket, service: bytes) -> bool:
        if service != self.service:
            conn.sendall(b"*-1\r\n")
            return True
        if self.behaviour == "slow":
            time.sleep(self.delay)
        elif self.behaviour == "huge":
            self._send_huge(conn)
            return False
        elif self.behaviour == "malformed":
            conn.sendall(self.malformed)
            return True
        host, port = self.names() if callable(self.names) else self.names
        conn.sendall(_encode([host.encode(), str(port).encode()]))
        return True

    def _send_huge(self, conn: socket.socket) -> None:
        """An array of 64-byte strings, ``huge_bytes`` of it, then silence until hung up on."""
        element = b"$64\r\n" + b"x" * 64 + b"\r\n"
        chunk = b"*100000000\r\n" + element * (_CHUNK // len(element))
        sent = 0
        while sent < self.huge_bytes:
            conn.sendall(chunk)
            sent += len(chunk)
            chunk = element * (_CHUNK // len(element))
            with self.lock:
                self.huge_sent = sent
        conn.recv(1)

    def switch_master(self, new: Address, old: Address = ("127.0.0.1", 1)) -> int:
        """Announces ``new`` as the service's primary to every subscriber; how many got it."""
        payload = b"%s %s %d %s %d" % (self.service, old[0].encode(), old[1], new[0].encode(), new[1])
        message = _encode([b"message", b"+switch-master", payload])
        with self.lock:
            subscribers = list(self.subscribers)
        reached = 0
        for conn in subscribers:
            try:
                conn.sendall(message)
                reached += 1
            except OSError:
                with self.lock:
                    if conn in self.subscribers:
                        self.subscribers.remove(conn)
        return reached

    def flood(self, per_second: float, seconds: float, names: list[Address]) -> int:
        """``+switch-master`` to every subscriber ``per_second`` times a second for ``seconds``,
        naming each of ``names`` in turn; returns the messages sent (blocks meanwhile)."""
        sent = 0
        began = time.monotonic()
        while (elapsed := time.monotonic() - began) < seconds:
            due = int(elapsed * per_second) + 1
            while sent < due:
                if self.switch_master(names[sent % len(names)]):
                    sent += 1
                else:
                    return sent
            time.sleep(max(0.0, began + due / per_second - time.monotonic()))
        return sent


class NotRedis(_Listener):
    """A listener that is not Redis: it keeps what it was sent and answers as a web server would,
    then hangs up."""

    def __init__(self) -> None:
        self.received = bytearray()
        super().__init__()

    def serve(self, conn: socket.socket) -> None:
        conn.settimeout(2.0)
        try:
            data = conn.recv(65536)
        except TimeoutError:
            data = b""
        with self.lock:
            self.received += data
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
