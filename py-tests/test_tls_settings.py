"""TLS settings (issue #20), no server needed: redis-py's names reach the native Settings from
keywords, the URL's query, the environment, LMCache's adapter JSON and the non-MP YAML, with
explicit > URL > environment > default; every front takes them; errors name the setting;
``ssl_cert_reqs="none"`` is logged at WARNING; reprs never hold key material or passwords."""

from __future__ import annotations

import inspect
import json
import logging
import ssl
import types
from pathlib import Path
from typing import Any

import pytest

from lmcache_resp import (
    PagedRespStore,
    RedisClient,
    RespConnectionError,
    RespConnector,
    RespConnectorClient,
    RespError,
    TlsError,
    _native,
)
from lmcache_resp.errors import InvalidInputError
from lmcache_resp.lmcache.non_mp import settings_from_lmcache_config
from lmcache_resp.settings import RespSettings

EMPTY: dict[str, str] = {}
SSL_ENV = ("LMCACHE_RESP_SSL_CA_CERTS", "LMCACHE_RESP_SSL_CERTFILE", "LMCACHE_RESP_SSL_KEYFILE")
TLS_FIELDS = ("ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile", "ssl_check_hostname", "ssl_cert_reqs",
              "ssl_server_name")
VERIFICATION_OFF = "TLS certificate verification is off (ssl_cert_reqs='none')"

# A throwaway test CA (ECDSA P-256, self-signed, valid to 2126) and a client certificate it
# signed, with its key: test material only, trusted by nothing; rust/src/settings/tests.rs
# uses the same files.
TEST_DATA = Path(__file__).resolve().parents[1] / "rust/src/settings/testdata"
TEST_CA = (TEST_DATA / "ca.pem").read_text()
TEST_CLIENT_CERT = (TEST_DATA / "client.pem").read_text()
TEST_CLIENT_KEY = (TEST_DATA / "client.key").read_text()
TEST_CLIENT_KEY_BODY = [line for line in TEST_CLIENT_KEY.splitlines() if not line.startswith("-----")]


class Files(types.SimpleNamespace):
    ca: str
    other_ca: str
    env_ca: str
    cert: str
    key: str
    ca_dir: str


@pytest.fixture
def files(tmp_path: Path) -> Files:
    def write(name: str, text: str) -> str:
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    ca_dir = tmp_path / "cas"
    ca_dir.mkdir()
    (ca_dir / "ca.pem").write_text(TEST_CA)
    return Files(
        ca=write("ca.pem", TEST_CA), other_ca=write("url-ca.pem", TEST_CA), env_ca=write("env-ca.pem", TEST_CA),
        cert=write("client.pem", TEST_CLIENT_CERT), key=write("client.key", TEST_CLIENT_KEY), ca_dir=str(ca_dir),
    )


@pytest.fixture(autouse=True)
def no_ssl_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process's own LMCACHE_RESP_SSL_* (if any) stay out of these tests."""
    for name in SSL_ENV:
        monkeypatch.delenv(name, raising=False)


# -- sources and precedence --------------------------------------------------------------------


def test_tls_is_off_by_default_and_the_fields_read_as_off() -> None:
    s = RespSettings.resolve(env=EMPTY)
    assert (s.ssl, s.ssl_ca_certs, s.ssl_ca_path, s.ssl_certfile, s.ssl_keyfile) == (False, None, None, None, None)
    assert (s.ssl_check_hostname, s.ssl_cert_reqs, s.ssl_server_name) == (False, None, None)
    assert {k: v for k, v in s.to_dict().items() if k.startswith("ssl")} == {
        "ssl": False, "ssl_ca_certs": None, "ssl_ca_path": None, "ssl_certfile": None, "ssl_keyfile": None,
        "ssl_check_hostname": False, "ssl_cert_reqs": None, "ssl_server_name": None,
    }
    assert set(TLS_FIELDS) | {"ssl"} <= set(_native.Settings.fields)


def test_keywords_reach_the_native_settings(files: Files) -> None:
    s = RespSettings.resolve(
        host="cache.example", port=6380, ssl=True, ssl_ca_certs=files.ca, ssl_certfile=files.cert,
        ssl_keyfile=files.key, ssl_check_hostname=False, ssl_server_name="redis.internal", env=EMPTY,
    )
    assert (s.ssl, s.ssl_ca_certs, s.ssl_certfile, s.ssl_keyfile) == (True, files.ca, files.cert, files.key)
    assert (s.ssl_check_hostname, s.ssl_cert_reqs, s.ssl_server_name) == (False, "required", "redis.internal")
    # pathlib.Path works wherever a path does.
    s = RespSettings.resolve(ssl=True, ssl_ca_path=Path(files.ca_dir), env=EMPTY)
    assert (s.ssl_ca_path, s.ssl_ca_certs, s.ssl_check_hostname) == (files.ca_dir, None, True)


def test_the_url_and_its_query_reach_the_native_settings(files: Files) -> None:
    for scheme in ("rediss", "resps"):
        s = RespSettings.resolve(
            f"{scheme}://u:pw@cache.example:6380/1?ssl_ca_certs={files.ca}&ssl_check_hostname=false"
            "&ssl_cert_reqs=required&ssl_server_name=redis.internal", env=EMPTY,
        )
        assert (s.ssl, s.host, s.port, s.db, s.ssl_ca_certs) == (True, "cache.example", 6380, 1, files.ca)
        assert (s.ssl_check_hostname, s.ssl_server_name) == (False, "redis.internal")
    # ssl=true in the query upgrades a redis:// URL, as ssl=True does.
    assert RespSettings.resolve(f"redis://h?ssl=true&ssl_ca_certs={files.ca}", env=EMPTY).ssl
    assert RespSettings.resolve("redis://h", ssl=True, ssl_ca_certs=files.ca, env=EMPTY).ssl


def test_the_environment_fills_in_the_files_only_where_tls_is_on(files: Files, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"LMCACHE_RESP_SSL_CA_CERTS": files.env_ca, "LMCACHE_RESP_SSL_CERTFILE": files.cert,
           "LMCACHE_RESP_SSL_KEYFILE": files.key}
    s = RespSettings.resolve("rediss://h", env=env)
    assert (s.ssl_ca_certs, s.ssl_certfile, s.ssl_keyfile) == (files.env_ca, files.cert, files.key)
    # Set for a whole deployment: a plaintext server ignores them, even when they are wrong.
    bad = {name: "/nonexistent/file.pem" for name in SSL_ENV}
    for url in (None, "redis://h", "unix:///run/r.sock"):
        assert not RespSettings.resolve(url, env=bad).ssl
    from_env = r"^ssl_ca_certs /nonexistent/file\.pem: .*\(from LMCACHE_RESP_SSL_CA_CERTS\)$"
    with pytest.raises(InvalidInputError, match=from_env):
        RespSettings.resolve("rediss://h", env=bad)
    # resolve() reads os.environ.
    monkeypatch.setenv("LMCACHE_RESP_SSL_CA_CERTS", files.env_ca)
    assert RespSettings.resolve("rediss://h").ssl_ca_certs == files.env_ca
    assert RespSettings.resolve("redis://h").ssl_ca_certs is None


def test_explicit_over_url_over_env(files: Files) -> None:
    env = {"LMCACHE_RESP_SSL_CA_CERTS": files.env_ca}
    url = f"rediss://h?ssl_ca_certs={files.other_ca}"
    assert RespSettings.resolve(url, env=env, ssl_ca_certs=files.ca).ssl_ca_certs == files.ca
    assert RespSettings.resolve(url, env=env).ssl_ca_certs == files.other_ca
    assert RespSettings.resolve("rediss://h", env=env).ssl_ca_certs == files.env_ca
    # LMCache's "not set": an empty value lets the next source apply.
    assert RespSettings.resolve(url, env=env, ssl_ca_certs="").ssl_ca_certs == files.other_ca
    url = f"rediss://h?ssl_ca_certs={files.ca}&ssl_server_name=url.internal&ssl_check_hostname=false"
    s = RespSettings.resolve(url, env=EMPTY, ssl_server_name="arg.internal", ssl_check_hostname=True)
    assert (s.ssl_server_name, s.ssl_check_hostname) == ("arg.internal", True)


def test_lmcache_adapter_json_and_non_mp_yaml_carry_the_tls_keys(files: Files) -> None:
    document = {
        "type": "native_plugin", "module_path": "lmcache_resp.lmcache.mp", "class_name": "RespConnector",
        "adapter_params": {"url": "rediss://cache.example:6380", "ssl_ca_certs": files.ca, "ssl_certfile": files.cert,
                           "ssl_keyfile": files.key, "ssl_server_name": "", "num_workers": 2},
        "max_capacity_gb": 40,
    }
    for config in (document, json.dumps(document)):
        s = RespSettings.from_lmcache(config, env=EMPTY)
        assert (s.ssl, s.ssl_ca_certs, s.ssl_certfile, s.ssl_server_name) == (True, files.ca, files.cert, None)
    flat = {"type": "resp", "host": "cache.example", "port": 6380, "ssl": True, "ssl_ca_certs": files.ca}
    assert RespSettings.from_lmcache(flat, env=EMPTY).ssl_ca_certs == files.ca
    plugin_config = types.SimpleNamespace(
        remote_storage_plugins=["resp"],
        extra_config={
            "remote_storage_plugin.resp.module_path": "lmcache_resp.lmcache.non_mp",
            "remote_storage_plugin.resp.class_name": "RespRemoteConnector",
            "remote_storage_plugin.resp.host": "cache.example",
            "remote_storage_plugin.resp.port": 6380,
            "remote_storage_plugin.resp.ssl": True,
            "remote_storage_plugin.resp.ssl_ca_certs": files.ca,
            "remote_storage_plugin.resp.ssl_check_hostname": "false",
        },
    )
    s = settings_from_lmcache_config(plugin_config)
    assert (s.ssl, s.ssl_ca_certs, s.ssl_check_hostname, s.port) == (True, files.ca, False, 6380)
    plugin_config.extra_config["remote_storage_plugin.resp.ssl"] = False
    with pytest.raises(InvalidInputError, match=r"extra_config remote_storage_plugin\.resp\.\*: ssl_ca_certs, "
                                                r"ssl_check_hostname are set but TLS is off"):
        settings_from_lmcache_config(plugin_config)


# -- every front takes the keywords ---------------------------------------------------------------


def test_every_front_takes_the_tls_keywords(files: Files) -> None:
    """Each front hands the keywords to the native Settings: the refusal of an ssl_* setting
    without TLS comes from there, before anything connects (no server is needed)."""
    params = set(inspect.signature(RedisClient.__init__).parameters)
    assert {"ssl", *TLS_FIELDS} <= params
    off = r"^ssl_ca_certs is set but TLS is off: use a rediss:// URL or ssl=True"
    with pytest.raises(InvalidInputError, match=off):
        RedisClient("127.0.0.1", 1, ssl_ca_certs=files.ca)
    with pytest.raises(InvalidInputError, match=off):
        PagedRespStore("redis://127.0.0.1:1", page_size=4096, num_pages=1, ssl_ca_certs=files.ca)
    with pytest.raises(InvalidInputError, match=off):
        RespConnector(host="127.0.0.1", port=1, ssl_ca_certs=files.ca)
    with pytest.raises(InvalidInputError, match=off):
        RespConnectorClient.from_settings("redis://127.0.0.1:1", ssl_ca_certs=files.ca)
    with pytest.raises(InvalidInputError, match="keyword settings .ssl_ca_certs. go with a URL"):
        RespConnectorClient.from_settings(RespSettings(), ssl_ca_certs=files.ca)
    # A missing CA is the native check's error, named, through every front.
    missing = r"^ssl_ca_certs /nonexistent/ca\.pem: "
    with pytest.raises(InvalidInputError, match=missing):
        RedisClient(url="rediss://127.0.0.1:1", ssl_ca_certs="/nonexistent/ca.pem")
    with pytest.raises(InvalidInputError, match=missing):
        PagedRespStore("rediss://127.0.0.1:1", page_size=4096, num_pages=1, ssl_ca_certs="/nonexistent/ca.pem")
    with pytest.raises(InvalidInputError, match=missing):
        RespConnector(url="rediss://127.0.0.1:1", ssl_ca_certs="/nonexistent/ca.pem")
    with pytest.raises(InvalidInputError, match=missing):
        RespConnectorClient.from_settings("rediss://127.0.0.1:1", ssl_ca_certs="/nonexistent/ca.pem")
    # Through a bridge the bridge holds them.
    with pytest.raises(InvalidInputError, match="the bridge holds the connection settings; ssl_ca_certs"):
        RespConnector(bridge="/nonexistent/bridge.sock", ssl_ca_certs=files.ca)


# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "kwargs", "message"),
    [
        ("rediss://h", {"ssl": False}, r"ssl=False contradicts the URL, which asks for TLS \(its rediss:// scheme\)"),
        ("redis://h?ssl=true", {"ssl": False}, r"ssl=False contradicts the URL, which asks for TLS \(ssl=true"),
        ("rediss://h?ssl=false", {}, r"ssl=false in the URL's query contradicts its rediss:// scheme"),
        ("redis://h", {"ssl_cert_reqs": "none"}, r"^ssl_cert_reqs is set but TLS is off"),
        ("redis://h?ssl_server_name=x", {}, r"^ssl_server_name is set but TLS is off"),
        (None, {"ssl": "maybe"}, r"^ssl must be true or false, got 'maybe'"),
        ("rediss://h", {"ssl_ca_certs": 5}, r"^ssl_ca_certs must be a str, not int"),
        ("rediss://h", {"ssl_ca_certs": b"/etc/ca.pem"}, r"^ssl_ca_certs must be a str, not bytes"),
        ("rediss://h", {"ssl_check_hostname": "perhaps"}, r"^ssl_check_hostname must be true or false, got 'perhaps'"),
        ("rediss://h", {"ssl_cert_reqs": "sometimes"}, r"^ssl_cert_reqs must be 'required' \(the default\), "
                                                       r"'optional' \(the same, for a client\) or 'none'"),
        ("rediss://h", {"ssl_server_name": "not a name!"}, r"^ssl_server_name must be a DNS name or an IP address"),
        ("rediss://h", {"ssl_ca_path": "/nonexistent/dir"}, r"^ssl_ca_path /nonexistent/dir is not a directory"),
        ("rediss://h", {"ssl_cert_reqs": "none", "ssl_check_hostname": True},
         r"^ssl_check_hostname=True needs the certificate verified"),
        ("rediss://h", {"unix_path": "/run/r.sock"}, r"^TLS is on but the server is the Unix socket /run/r\.sock"),
        (None, {"ssl_ca_cert": "/x"}, r"'ssl_ca_cert' \(did you mean 'ssl_ca_certs'\?\)"),
        (None, {"ssl_check_hostnme": False}, r"'ssl_check_hostnme' \(did you mean 'ssl_check_hostname'\?\)"),
        ("rediss://h?ssl_keyfil=/x", {}, r"'ssl_keyfil' \(did you mean 'ssl_keyfile'\?\)"),
    ],
)
def test_bad_tls_settings_name_the_setting(url: str | None, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        RespSettings.resolve(url, env=EMPTY, **kwargs)


def test_a_certificate_without_its_key_and_a_key_passphrase_are_refused(files: Files) -> None:
    with pytest.raises(InvalidInputError, match="^ssl_certfile is set but ssl_keyfile is not: mutual TLS needs both"):
        RespSettings.resolve("rediss://h", env=EMPTY, ssl_ca_certs=files.ca, ssl_certfile=files.cert)
    refused = r"^ssl_password \(a passphrase for ssl_keyfile\) is not supported"
    for url, kwargs in (("rediss://h", {"ssl_password": "hunter2"}), ("rediss://h?ssl_password=hunter2", {})):
        with pytest.raises(InvalidInputError, match=refused) as info:
            RespSettings.resolve(url, env=EMPTY, **kwargs)
        assert "hunter2" not in str(info.value)


def test_tls_error_is_permanent_not_a_connection_error() -> None:
    assert issubclass(TlsError, RespError)
    assert not issubclass(TlsError, RespConnectionError) and not issubclass(TlsError, ConnectionError)
    import lmcache_resp.errors

    assert lmcache_resp.errors.TlsError is TlsError and "TlsError" in lmcache_resp.errors.__all__


# -- warnings and what prints ---------------------------------------------------------------------


@pytest.mark.parametrize("cert_reqs", ["none", "NONE", ssl.CERT_NONE])
def test_cert_reqs_none_is_logged_at_warning(cert_reqs: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="lmcache_resp")
    s = RespSettings.resolve("rediss://h", env=EMPTY, ssl_cert_reqs=cert_reqs)
    assert (s.ssl_cert_reqs, s.ssl_check_hostname) == ("none", False)
    warned = [r for r in caplog.records if VERIFICATION_OFF in r.getMessage()]
    assert warned and all(r.levelno == logging.WARNING and r.name == "lmcache_resp" for r in warned)
    assert "certificate NOT verified" in repr(s)


@pytest.mark.parametrize("cert_reqs", ["required", "optional", ssl.CERT_REQUIRED, ssl.CERT_OPTIONAL])
def test_cert_reqs_required_and_optional_verify_without_a_warning(
    cert_reqs: Any, files: Files, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="lmcache_resp")
    s = RespSettings.resolve("rediss://h", env=EMPTY, ssl_cert_reqs=cert_reqs, ssl_ca_certs=files.ca)
    assert (s.ssl_cert_reqs, s.warnings) == ("required", [])
    assert not any(VERIFICATION_OFF in r.getMessage() for r in caplog.records)


def test_reprs_show_paths_never_keys_or_passwords(files: Files) -> None:
    s = RespSettings.resolve(
        "rediss://bob:hunter2@cache.example:6380", env=EMPTY, ssl_ca_certs=files.ca, ssl_certfile=files.cert,
        ssl_keyfile=files.key,
    )
    shown = [repr(s), str(s), repr(s.to_dict()), json.dumps(s.to_dict())]
    for text in shown:
        assert "hunter2" not in text, text
        assert not any(line in text for line in TEST_CLIENT_KEY_BODY), text
        assert "PRIVATE KEY" not in text and "MIIB" not in text, text
    assert f"tls=on (ca={files.ca}, client cert={files.cert}, hostname checked)" in repr(s)
    assert (s.to_dict()["ssl_keyfile"], s.to_dict()["password"]) == (files.key, "***")
    # Errors about the key name the file, never what is in it.
    encrypted = Path(files.key).with_name("encrypted.key")
    encrypted.write_text("-----BEGIN ENCRYPTED PRIVATE KEY-----\n" + TEST_CLIENT_KEY_BODY[0] + "\n"
                         "-----END ENCRYPTED PRIVATE KEY-----\n")
    with pytest.raises(InvalidInputError, match="encrypted with a passphrase") as info:
        RespSettings.resolve("rediss://h", env=EMPTY, ssl_ca_certs=files.ca, ssl_certfile=files.cert,
                             ssl_keyfile=str(encrypted))
    assert str(encrypted) in str(info.value) and TEST_CLIENT_KEY_BODY[0] not in str(info.value)
