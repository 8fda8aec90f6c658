"""Exceptions raised by lmcache_resp.

Every exception derives from :class:`RespError`; where a builtin fits, it derives from that
too, so ``except ConnectionError`` / ``except TimeoutError`` / ``except ValueError`` work.
Messages never contain passwords.
"""

from __future__ import annotations

__all__ = [
    "AuthenticationError",
    "BatchError",
    "ClosedError",
    "ConnectorError",
    "EngineFailedError",
    "ForkedError",
    "InvalidInputError",
    "PageError",
    "PartialReadError",
    "ProtocolError",
    "RespConnectionError",
    "RespError",
    "RespOSError",
    "RespTimeoutError",
    "ServerError",
    "TlsError",
    "ValueTooLargeError",
]


class RespError(Exception):
    """Base class of every lmcache_resp error."""

    @property
    def message(self) -> str:
        return str(self.args[-1]) if self.args else ""


class RespConnectionError(RespError, ConnectionError):
    """The server could not be reached or the connection broke (transient: retried)."""


class AuthenticationError(RespConnectionError):
    """The server refused the credentials (permanent: never retried)."""


class RespTimeoutError(RespError, TimeoutError):
    """An operation did not complete within its timeout."""


class ServerError(RespError):
    """The server answered with an error reply; ``message`` is the server's text."""


class ValueTooLargeError(RespError, ValueError):
    """A stored value is larger than the buffer or page it was to be read into."""


class ProtocolError(RespError):
    """The server sent bytes that are not valid RESP."""


class ClosedError(RespError):
    """The client or store is closed."""


class InvalidInputError(RespError, ValueError):
    """An argument cannot be used: key too long, read-only or non-contiguous buffer, ..."""


class PageError(RespError, ValueError):
    """A page was misused: double free, a page of another store, a stale page."""


class RespOSError(RespError, OSError):
    """A system call failed (memory, file descriptors, threads); ``errno`` says which."""


class PartialReadError(RespError):
    """A GET had started receiving into its buffer or page when its connection broke, and
    the retry did not deliver the whole value: the buffer holds part of a value. Do not
    read it; read the key again."""


class ForkedError(RespError):
    """The object was created by another process and inherited through fork(): it cannot be
    used here (its threads and connections belong to the parent). Create a new one."""


class EngineFailedError(RespError):
    """The I/O engine stopped working (a worker thread died); every call fails at once.
    Close the store and create a new one."""


class TlsError(RespError):
    """TLS with the server failed for a reason its certificate or configuration decides: the
    certificate is not trusted (unknown CA, wrong host name, expired, X.509 version 1), the
    port speaks plaintext behind a ``rediss://`` URL, or the server refused this client's
    certificate. The message names the endpoint and the reason. Permanent: not retried (later
    calls fail at once with it until it is checked again, 30 s later), never a fallback to
    plaintext, and not a ``ConnectionError`` (fix the certificates or the URL; waiting does
    not help). What the network path does to a handshake (a damaged record, a forged alert)
    is a ``RespConnectionError``, retried. A TLS server behind ``redis://`` resets the
    connection without a word, which is a ``RespConnectionError`` whose message says to use
    ``rediss://``."""


class ConnectorError(RespError, RuntimeError):
    """A batch of :class:`~lmcache_resp.RespConnectorClient` (LMCache's non-MP mode) failed:
    ``message`` names the failed keys and their errors. A RuntimeError too, as LMCache's
    ``ConnectorClientBase`` raises."""


class BatchError(RespError):
    """Some keys of a batch failed.

    ``results`` holds one entry per key: the usual result (bool or int) for keys that
    succeeded, the exception for keys that failed. ``errors`` maps key index to exception.
    """

    def __init__(self, message: str, results: list[object]) -> None:
        super().__init__(message)
        self.results = results
        self.errors = {i: r for i, r in enumerate(results) if isinstance(r, BaseException)}
