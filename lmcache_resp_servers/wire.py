"""Talking to a throwaway server the way its launcher checks on it: one command over a raw
socket (TLS or not), in RESP, with no client library."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Sequence
from typing import Any

from lmcache_resp_servers.ports import HOST

__all__ = ["ReplyError", "command", "connect", "encode", "info", "read_reply", "role"]


class ReplyError(Exception):
    """The server answered with an error (``-NOAUTH ...``)."""


def encode(args: Sequence[str | bytes]) -> bytes:
    frame = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg.encode() if isinstance(arg, str) else arg
        frame.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(frame)


def read_reply(stream: Any) -> object:
    line: bytes = stream.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionError("the server closed the connection")
    kind, body = line[:1], line[1:-2]
    if kind == b"+":
        return body.decode()
    if kind == b"-":
        return ReplyError(body.decode(errors="replace"))
    if kind == b":":
        return int(body)
    if kind == b"$":
        size = int(body)
        if size < 0:
            return None
        data: bytes = stream.read(size + 2)
        return data[:-2]
    if kind == b"*":
        count = int(body)
        return None if count < 0 else [read_reply(stream) for _ in range(count)]
    raise ConnectionError(f"not a RESP reply: {line[:80]!r}")


def connect(host: str, port: int, *, timeout: float = 5.0, tls: ssl.SSLContext | None = None) -> socket.socket:
    """A TCP connection to ``host:port``, TLS with ``tls`` (handshake done; ``host`` is the name
    the server's certificate must carry) or plaintext without."""
    sock = socket.create_connection((host, port), timeout=timeout)
    if tls is None:
        return sock
    try:
        return tls.wrap_socket(sock, server_hostname=host)
    except BaseException:
        sock.close()
        raise


def command(
    port: int, *args: str, password: str | None = None, host: str = HOST, timeout: float = 5.0,
    tls: ssl.SSLContext | None = None,
) -> object:
    """One command (after AUTH with ``password``); its reply. Error replies raise ReplyError.
    ``tls``: over TLS with this context (ServerCerts.client_context), ``host`` the name checked."""
    with connect(host, port, timeout=timeout, tls=tls) as sock:
        sock.sendall((encode(["AUTH", password]) if password is not None else b"") + encode(args))
        with sock.makefile("rb") as stream:
            if password is not None:
                auth = read_reply(stream)
                if isinstance(auth, ReplyError):
                    raise auth
            reply = read_reply(stream)
    if isinstance(reply, ReplyError):
        raise reply
    return reply


def info(
    port: int, *args: str, password: str | None, timeout: float = 5.0, tls: ssl.SSLContext | None = None
) -> dict[str, str]:
    """``INFO section`` or ``CLUSTER INFO`` as fields."""
    reply = command(port, *args, password=password, timeout=timeout, tls=tls)
    text = reply.decode(errors="replace") if isinstance(reply, bytes) else ""
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line and not line.startswith("#"))


def role(port: int, password: str | None, tls: ssl.SSLContext | None = None) -> str:
    reply = command(port, "ROLE", password=password, tls=tls)
    first = reply[0] if isinstance(reply, list) and reply else None
    return first.decode() if isinstance(first, bytes) else str(first)


