"""Connection settings: URLs, precedence, environment, validation, secrets. No server needed."""

from __future__ import annotations

import pickle

import pytest

from lmcache_resp.config import Secret, parse_url, redact_url, resolve_connection
from lmcache_resp.errors import InvalidInputError

EMPTY: dict[str, str] = {}


def test_defaults() -> None:
    s = resolve_connection(env=EMPTY)
    assert (s.host, s.port, s.unix_path, s.username, s.password, s.db, s.timeout) == (
        "localhost", 6379, None, None, None, 0, 10.0,
    )


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("resp://h:1", {"host": "h", "port": 1}),
        ("redis://h", {"host": "h"}),
        ("redis://u:p%40ss@h:2/5", {"host": "h", "port": 2, "username": "u", "password": Secret("p@ss"), "db": 5}),
        ("redis://:pw@h:3", {"host": "h", "port": 3, "password": Secret("pw")}),
        ("redis://[::1]:4", {"host": "::1", "port": 4}),
        ("unix:///run/redis.sock", {"unix_path": "/run/redis.sock"}),
        ("unix:///run/redis.sock?db=2", {"unix_path": "/run/redis.sock", "db": 2}),
    ],
)
def test_parse_url(url: str, expected: dict[str, object]) -> None:
    assert parse_url(url) == expected


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("rediss://h:1", "TLS is not supported"),
        ("http://h", "unsupported URL scheme"),
        ("redis://h:99999", "invalid URL"),
        ("redis://h/notadb", "non-negative integer"),
        ("unix://", "no socket path"),
        ("redis://:1", "has no host"),
    ],
)
def test_bad_urls(url: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        parse_url(url)


def test_url_errors_never_show_the_password() -> None:
    with pytest.raises(InvalidInputError) as info:
        parse_url("rediss://user:topsecret@h:1")
    assert "topsecret" not in str(info.value)
    assert redact_url("redis://user:topsecret@h:1/0") == "redis://user:***@h:1/0"


def test_precedence_explicit_over_url_over_env_over_default() -> None:
    env = {
        "LMCACHE_RESP_HOST": "env-host",
        "LMCACHE_RESP_PORT": "1111",
        "LMCACHE_RESP_USERNAME": "env-user",
        "LMCACHE_RESP_PASSWORD": "env-pw",
    }
    url = "redis://url-user:url-pw@url-host:2222/2"
    from_env = resolve_connection(env=env)
    assert (from_env.host, from_env.port, from_env.username, from_env.password) == (
        "env-host", 1111, "env-user", Secret("env-pw"),
    )
    from_url = resolve_connection(url=url, env=env)
    assert (from_url.host, from_url.port, from_url.username, from_url.password, from_url.db) == (
        "url-host", 2222, "url-user", Secret("url-pw"), 2,
    )
    explicit = resolve_connection(
        "arg-host", 3333, url=url, username="arg-user", password="arg-pw", db=4, timeout=1.5, env=env
    )
    assert (explicit.host, explicit.port, explicit.username, explicit.password, explicit.db, explicit.timeout) == (
        "arg-host", 3333, "arg-user", Secret("arg-pw"), 4, 1.5,
    )
    # Field by field: a URL without credentials still gets them from the environment.
    mixed = resolve_connection(url="resp://url-host:2222", env=env)
    assert (mixed.host, mixed.username, mixed.password) == ("url-host", "env-user", Secret("env-pw"))


def test_unix_socket_selection() -> None:
    s = resolve_connection(url="unix:///tmp/r.sock", env={"LMCACHE_RESP_HOST": "ignored"})
    assert (s.unix_path, s.host) == ("/tmp/r.sock", None)
    assert s.endpoint == "unix:/tmp/r.sock"
    # Explicit host/port win over a unix URL.
    s = resolve_connection("h", 1, url="unix:///tmp/r.sock", env=EMPTY)
    assert (s.unix_path, s.host, s.port) == (None, "h", 1)
    with pytest.raises(InvalidInputError, match="not both"):
        resolve_connection("h", unix_path="/tmp/x", env=EMPTY)


@pytest.mark.parametrize(
    ("kwargs", "env", "message"),
    [
        ({"port": 0}, EMPTY, "port must be an integer in 1..65535"),
        ({"port": 70000}, EMPTY, "port must be an integer in 1..65535"),
        ({"port": True}, EMPTY, "port must be an integer"),
        ({}, {"LMCACHE_RESP_PORT": "http"}, "LMCACHE_RESP_PORT must be an integer in 1..65535"),
        ({"db": -1}, EMPTY, "db must be an integer in 0..2147483647"),
        ({"timeout": 0}, EMPTY, "timeout must be a positive number"),
        ({"timeout": float("nan")}, EMPTY, "timeout must be a positive number"),
        ({"host": 5}, EMPTY, "host must be a str"),
        ({"password": 5}, EMPTY, "password must be a str"),
    ],
)
def test_invalid_values_name_the_field_and_range(kwargs: dict[str, object], env: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        resolve_connection(env=env, **kwargs)  # type: ignore[arg-type]


def test_secrets_never_print() -> None:
    s = resolve_connection(password="hunter2", username="bob", env=EMPTY)
    assert "hunter2" not in repr(s) and "hunter2" not in str(s)
    assert repr(s.password) == "Secret('***')" and str(s.password) == "***"
    assert s.password is not None and s.password.reveal() == "hunter2"
    assert s.native_kwargs()["password"] == "hunter2"
    with pytest.raises(TypeError, match="not picklable"):
        pickle.dumps(s.password)
