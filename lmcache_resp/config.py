"""Where the server is and how to log in: URLs, keyword arguments, environment.

Precedence, field by field: explicit keyword arguments, then the URL, then the
``LMCACHE_RESP_*`` environment variables, then defaults. Passwords are held in
:class:`Secret`, which never prints its value.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from lmcache_resp.errors import InvalidInputError

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "DEFAULT_TIMEOUT",
    "ENV_HOST",
    "ENV_PASSWORD",
    "ENV_PORT",
    "ENV_USERNAME",
    "ConnectionSettings",
    "Secret",
    "parse_url",
    "redact_url",
    "resolve_connection",
]

ENV_USERNAME = "LMCACHE_RESP_USERNAME"
ENV_PASSWORD = "LMCACHE_RESP_PASSWORD"
ENV_HOST = "LMCACHE_RESP_HOST"
ENV_PORT = "LMCACHE_RESP_PORT"

DEFAULT_HOST = "localhost"
DEFAULT_PORT = 6379
DEFAULT_TIMEOUT = 10.0

_SCHEMES = ("resp", "redis", "unix")


class Secret:
    """A password. ``repr``/``str`` show ``***``; :meth:`reveal` is the only way to the value."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise InvalidInputError(f"password must be a str, not {type(value).__name__}")
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    def __str__(self) -> str:
        return "***"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))

    def __reduce__(self) -> Any:
        raise TypeError("Secret values are not picklable: pass credentials through the environment")


@dataclass(frozen=True)
class ConnectionSettings:
    """Resolved connection settings. Safe to print: the password shows as ``***``."""

    host: str | None
    port: int
    unix_path: str | None
    username: str | None
    password: Secret | None
    db: int
    timeout: float

    @property
    def endpoint(self) -> str:
        if self.unix_path is not None:
            return f"unix:{self.unix_path}"
        host = self.host or ""
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    def native_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for the native constructors (the only place a secret is revealed)."""
        return {
            "unix_path": self.unix_path,
            "username": self.username,
            "password": self.password.reveal() if self.password is not None else None,
            "db": self.db,
            "timeout": self.timeout,
        }


def redact_url(url: str) -> str:
    """The URL with its password replaced by ``***`` (for messages and logs)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if parts.password is None:
        return url
    netloc = parts.netloc
    userinfo, _, hostport = netloc.rpartition("@")
    user = userinfo.split(":", 1)[0]
    return parts._replace(netloc=f"{user}:***@{hostport}").geturl()


def parse_url(url: str) -> dict[str, Any]:
    """The fields a URL sets: ``resp://host:port``, ``redis://[user:pass@]host:port[/db]``,
    ``unix:///path/to/redis.sock[?db=N]``. Fields the URL does not mention are absent."""
    if not isinstance(url, str):
        raise InvalidInputError(f"url must be a str, not {type(url).__name__}")
    shown = redact_url(url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidInputError(f"invalid URL {shown!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES:
        hint = " (TLS is not supported)" if scheme in ("rediss", "resps") else ""
        raise InvalidInputError(
            f"unsupported URL scheme {parts.scheme!r}{hint} in {shown!r}: use resp://, redis:// or unix://"
        )
    fields: dict[str, Any] = {}
    if parts.username:
        fields["username"] = unquote(parts.username)
    if parts.password:
        fields["password"] = Secret(unquote(parts.password))
    query = parse_qs(parts.query)
    if scheme == "unix":
        path = parts.path or (parts.netloc if parts.netloc.startswith("/") else "")
        if not path:
            raise InvalidInputError(f"unix URL {shown!r} has no socket path: use unix:///path/to/redis.sock")
        fields["unix_path"] = unquote(path)
    else:
        if not parts.hostname:
            raise InvalidInputError(f"URL {shown!r} has no host: use {scheme}://host:port")
        fields["host"] = parts.hostname
        if port is not None:
            fields["port"] = port
        db_path = parts.path.strip("/")
        if db_path:
            fields["db"] = _db_from_text(db_path, f"database in URL {shown!r}")
    if "db" in query:
        fields["db"] = _db_from_text(query["db"][-1], f"db parameter in URL {shown!r}")
    return fields


def _db_from_text(text: str, what: str) -> int:
    if not text.isdigit():
        raise InvalidInputError(f"{what} must be a non-negative integer, got {text!r}")
    return int(text)


def _check_port(port: Any, source: str) -> int:
    if isinstance(port, str):
        port = port.strip()
        if not port.isdigit():
            raise InvalidInputError(f"{source} must be an integer in 1..65535, got {port!r}")
        port = int(port)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise InvalidInputError(f"{source} must be an integer in 1..65535, got {port!r}")
    return port


def _check_db(db: Any) -> int:
    if isinstance(db, bool) or not isinstance(db, int) or not 0 <= db < 2**31:
        raise InvalidInputError(f"db must be an integer in 0..2147483647, got {db!r}")
    return db


def _check_timeout(timeout: Any) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout <= 0:
        raise InvalidInputError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return float(timeout)


def _optional_text(value: Any, name: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a str, not {type(value).__name__}")
    return value


def resolve_connection(
    host: str | None = None,
    port: int | str | None = None,
    *,
    url: str | None = None,
    unix_path: str | None = None,
    username: str | None = None,
    password: str | Secret | None = None,
    db: int | None = None,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
) -> ConnectionSettings:
    """Resolves every field: explicit argument > URL > environment > default."""
    env = os.environ if env is None else env
    from_url = parse_url(url) if url is not None else {}

    def pick(name: str, explicit: Any, env_name: str | None = None) -> Any:
        if explicit is not None:
            return explicit
        if name in from_url:
            return from_url[name]
        if env_name is not None and env.get(env_name):
            return env[env_name]
        return None

    explicit_unix = unix_path is not None
    explicit_tcp = host is not None or port is not None
    if explicit_unix and explicit_tcp:
        raise InvalidInputError("give either host/port or unix_path, not both")
    unix = unix_path if explicit_unix else (None if explicit_tcp else from_url.get("unix_path"))
    if unix is not None:
        resolved_host, resolved_port = None, DEFAULT_PORT
        unix = _optional_text(unix, "unix_path")
    else:
        raw_host = pick("host", host, ENV_HOST)
        resolved_host = _optional_text(raw_host, "host") or DEFAULT_HOST
        if port is not None:
            resolved_port = _check_port(port, "port")
        elif "port" in from_url:
            resolved_port = _check_port(from_url["port"], "port")
        elif env.get(ENV_PORT):
            resolved_port = _check_port(env[ENV_PORT], ENV_PORT)
        else:
            resolved_port = DEFAULT_PORT

    raw_password = pick("password", password, ENV_PASSWORD)
    if isinstance(raw_password, str):
        raw_password = Secret(raw_password) if raw_password else None
    elif raw_password is not None and not isinstance(raw_password, Secret):
        raise InvalidInputError(f"password must be a str, not {type(raw_password).__name__}")

    return ConnectionSettings(
        host=resolved_host,
        port=resolved_port,
        unix_path=unix,
        username=_optional_text(pick("username", username, ENV_USERNAME), "username"),
        password=raw_password,
        db=_check_db(pick("db", db) if pick("db", db) is not None else 0),
        timeout=_check_timeout(timeout if timeout is not None else DEFAULT_TIMEOUT),
    )
