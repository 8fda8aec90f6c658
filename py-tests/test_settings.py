"""RespSettings: one model for URLs, LMCache's L2 adapter JSON, keywords and the environment.

Precedence for every field, LMCache's three JSON shapes, an error per bad field, and secrets
absent from reprs, dicts, errors and the log lines of the connector and the store."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from conftest import RedisServer

from lmcache_resp import PagedRespStore, RespConnector, _native
from lmcache_resp.errors import AuthenticationError, InvalidInputError
from lmcache_resp.settings import EvictionSettings, RespSettings, Secret

EMPTY: dict[str, str] = {}
ENV = {
    "LMCACHE_RESP_HOST": "env-host",
    "LMCACHE_RESP_PORT": "1111",
    "LMCACHE_RESP_USERNAME": "env-user",
    "LMCACHE_RESP_PASSWORD": "env-pw",
}


def value_of(settings: RespSettings, name: str) -> Any:
    if name.startswith("eviction."):
        return getattr(settings.eviction, name.removeprefix("eviction."))
    return getattr(settings, name)


# field, explicit keywords -> expected, URL -> expected, env-var value -> expected (None: no
# env fallback for this field), default.
PRECEDENCE = [
    ("host", {"host": "arg-host"}, "arg-host", "resp://url-host:2222", "url-host", "env-host", "localhost"),
    ("port", {"port": 3333}, 3333, "resp://url-host:2222", 2222, 1111, 6379),
    ("username", {"username": "arg-user"}, "arg-user", "redis://url-user:url-pw@h", "url-user", "env-user", None),
    ("password", {"password": "arg-pw"}, Secret("arg-pw"), "redis://url-user:url-pw@h", Secret("url-pw"),
     Secret("env-pw"), None),
    ("unix_path", {"unix_path": "/run/arg.sock"}, "/run/arg.sock", "unix:///run/url.sock", "/run/url.sock", None, None),
    ("db", {"db": 4}, 4, "redis://h/2", 2, None, 0),
    ("timeout", {"timeout": 1.5}, 1.5, "resp://h?timeout=3", 3.0, None, 10.0),
    ("num_workers", {"num_workers": 4}, 4, "resp://h?num_workers=16", 16, None, 8),
    ("connections_per_worker", {"connections_per_worker": 2}, 2, "resp://h?connections_per_worker=3", 3, None, 1),
    ("cpu_affinity", {"cpu_affinity": "none"}, "none", "resp://h?cpu_affinity=0-3,8", "0-3,8", None, "auto"),
    ("max_capacity_gb", {"max_capacity_gb": 2.5}, 2.5, "resp://h?max_capacity_gb=40", 40.0, None, 0.0),
    ("eviction.eviction_policy", {"eviction": {"eviction_policy": "lru"}}, "LRU", "resp://h?eviction_policy=NOOP",
     "noop", None, "LRU"),
    ("eviction.trigger_watermark", {"eviction": {"trigger_watermark": 0.9}}, 0.9, "resp://h?trigger_watermark=0.7",
     0.7, None, 0.8),
    ("eviction.eviction_ratio", {"eviction": {"eviction_ratio": 0.5}}, 0.5, "resp://h?eviction_ratio=0.3", 0.3,
     None, 0.2),
]


@pytest.mark.parametrize(("name", "explicit", "from_explicit", "url", "from_url", "from_env", "default"), PRECEDENCE)
def test_precedence_explicit_over_url_over_env_over_default(
    name: str, explicit: dict[str, Any], from_explicit: Any, url: str, from_url: Any, from_env: Any, default: Any
) -> None:
    assert value_of(RespSettings.resolve(env=EMPTY), name) == default
    # Fields without an env fallback keep their default whatever the environment holds.
    assert value_of(RespSettings.resolve(env=ENV), name) == (default if from_env is None else from_env)
    assert value_of(RespSettings.resolve(url, env=ENV), name) == from_url
    assert value_of(RespSettings.resolve(url, env=ENV, **explicit), name) == from_explicit
    assert value_of(RespSettings.from_url(url, env=ENV, **explicit), name) == from_explicit


def test_precedence_is_field_by_field() -> None:
    s = RespSettings.resolve(
        "resp://url-host:2222?trigger_watermark=0.7&num_workers=16", env=ENV,
        num_workers=4, eviction={"eviction_ratio": 0.5},
    )
    assert (s.host, s.port, s.username, s.password) == ("url-host", 2222, "env-user", Secret("env-pw"))
    assert s.num_workers == 4
    assert s.eviction == EvictionSettings("LRU", 0.7, 0.5)


def test_resolve_keeps_empty_credentials_as_none_but_empty_host_as_unset() -> None:
    s = RespSettings.resolve(env=ENV, host="", username="", password="")
    assert (s.host, s.username, s.password) == ("env-host", None, None)


PARAMS = {"host": "10.0.0.5", "port": 6380, "num_workers": 16, "username": "", "password": ""}
# LMCache's own keys, at the top level of its adapter JSON (0.5.6 and 0.5.7): its accounting and
# eviction, its routing and persistence flags.
LMCACHE_KEYS = {"max_capacity_gb": 10, "eviction": {"eviction_policy": "LRU", "trigger_watermark": 0.75,
                                                    "eviction_ratio": 0.25},
                "shared": False, "persist_enabled": True, "serde": {"type": "naive"}}
PLUGIN_DOCUMENT = {"type": "native_plugin", "module_path": "lmcache_resp.lmcache.mp", "class_name": "RespConnector",
                   "adapter_params": PARAMS, **LMCACHE_KEYS}


@pytest.mark.parametrize(
    "config",
    [
        json.dumps(PLUGIN_DOCUMENT),
        PLUGIN_DOCUMENT,
        json.dumps({"type": "resp", **PARAMS, **LMCACHE_KEYS}),
        {"type": "resp", **PARAMS, **LMCACHE_KEYS},
        json.dumps(PARAMS),
        PARAMS,
    ],
    ids=["plugin-json", "plugin-dict", "resp-json", "resp-dict", "params-json", "params-dict"],
)
def test_lmcache_config_in_its_three_shapes(config: Any) -> None:
    s = RespSettings.from_lmcache(config, env=ENV)
    assert (s.host, s.port, s.num_workers) == ("10.0.0.5", 6380, 16)
    # LMCache leaves credentials empty in the JSON: the environment supplies them.
    assert (s.username, s.password) == ("env-user", Secret("env-pw"))
    # Capacity and eviction at the top level are LMCache's (MP mode): the connector tracks none.
    assert s.capacity_bytes == 0 and s.eviction == EvictionSettings()


@pytest.mark.parametrize("shape", ["plugin", "resp"])
def test_lmcache_0_5_6_affinity_tag_is_accepted_with_a_warning_that_0_5_7_refuses_it(
    shape: str, caplog: pytest.LogCaptureFixture
) -> None:
    """LMCache 0.5.6 reads a top-level affinity_tag; 0.5.7 refuses it ("affinity_tag was removed;
    L1 affinity is resolved from memory tags", l2_adapters/config.py). A 0.5.6 document still
    reads, saying so; the keys named as LMCache's leave it out."""
    caplog.set_level(logging.WARNING, logger="lmcache_resp")
    config = {**PLUGIN_DOCUMENT, "affinity_tag": "a"} if shape == "plugin" else {"type": "resp", **PARAMS,
                                                                                  "affinity_tag": "a"}
    s = RespSettings.from_lmcache(config, env=ENV)
    assert (s.host, s.port, s.capacity_bytes) == ("10.0.0.5", 6380, 0)
    assert len(s.warnings) == 1 and "LMCache 0.5.7 refuses it" in s.warnings[0], s.warnings
    assert "affinity_tag is LMCache 0.5.6's" in caplog.text
    with pytest.raises(InvalidInputError) as info:
        RespSettings.from_lmcache({**PLUGIN_DOCUMENT, "num_workers": 1}, env=EMPTY)
    assert "LMCache's own are eviction, max_capacity_gb, persist_enabled, serde, shared)" in str(info.value)


def test_a_settings_is_copied_as_it_is() -> None:
    """What the LMCache readers build in the core becomes a RespSettings by copy."""
    original = RespSettings.resolve("redis://u:pw@h:1?num_workers=3", env=EMPTY)
    copy = RespSettings(original)
    assert type(copy) is RespSettings and copy.to_dict() == original.to_dict() and copy.password == Secret("pw")
    with pytest.raises(InvalidInputError, match="copied as it is"):
        RespSettings(original, num_workers=4)


def test_in_mp_mode_capacity_inside_adapter_params_is_an_error_saying_where_it_goes() -> None:
    for params in ({**PARAMS, "max_capacity_gb": 10}, {**PARAMS, "eviction": {"eviction_policy": "LRU"}}):
        with pytest.raises(InvalidInputError, match="in MP mode LMCache owns capacity and eviction.*top level"):
            RespSettings.from_lmcache({**PLUGIN_DOCUMENT, "adapter_params": params}, env=EMPTY)
        with pytest.raises(InvalidInputError, match="in MP mode LMCache owns"):
            RespSettings.from_adapter_params(params, env=EMPTY)
    # Where the connector owns eviction (LMCache's non-MP mode, through the plugin), they are its.
    s = RespSettings.from_adapter_params({**PARAMS, "max_capacity_gb": 10}, env=EMPTY, lmcache_evicts=False)
    assert s.capacity_bytes == 10 << 30, "GiB, as LMCache counts max_capacity_gb"


def test_lmcache_empty_host_and_zero_port_fall_back_to_the_environment() -> None:
    s = RespSettings.from_lmcache('{"type": "resp", "host": "", "port": 0, "num_workers": 8}', env=ENV)
    assert (s.host, s.port) == ("env-host", 1111)
    s = RespSettings.from_lmcache({"type": "resp", "num_workers": 8}, env=ENV)
    assert (s.host, s.port) == ("env-host", 1111)
    assert RespSettings.from_lmcache({"host": ""}, env=EMPTY).host == "localhost"
    # Explicit JSON values win over the environment.
    s = RespSettings.from_lmcache({"host": "json-host", "port": 7000, "username": "bob", "password": "pw"}, env=ENV)
    assert (s.host, s.port, s.username, s.password) == ("json-host", 7000, "bob", Secret("pw"))


def test_lmcache_extras_url_and_resp_num_threads() -> None:
    s = RespSettings.from_adapter_params({"url": "redis://u:pw@h:1/3", "resp_num_threads": 12}, env=EMPTY)
    assert (s.host, s.port, s.db, s.username, s.password, s.num_workers) == ("h", 1, 3, "u", Secret("pw"), 12)
    with pytest.raises(InvalidInputError, match="num_workers or resp_num_threads, not both"):
        RespSettings.from_adapter_params({"num_workers": 4, "resp_num_threads": 12}, env=EMPTY)


def test_lmcache_numeric_strings_are_accepted_like_lmcache_does() -> None:
    s = RespSettings.from_lmcache({"port": "6390", "num_workers": "4", "timeout": "1.5"}, env=EMPTY)
    assert (s.port, s.num_workers, s.timeout) == (6390, 4, 1.5)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"port": 0}, r"port must be an integer in 1\.\.65535, got 0"),
        ({"port": 70000}, r"port must be an integer in 1\.\.65535, got 70000"),
        ({"port": "http"}, r"port must be an integer in 1\.\.65535, got 'http'"),
        ({"num_workers": 0}, r"num_workers must be an integer in 1\.\.1024, got 0"),
        ({"num_workers": 1025}, r"num_workers must be an integer in 1\.\.1024, got 1025"),
        ({"num_workers": 2.5}, r"num_workers must be an integer in 1\.\.1024, got 2\.5"),
        ({"connections_per_worker": 65}, r"connections_per_worker must be an integer in 1\.\.64, got 65"),
        ({"cpu_affinity": "sometimes"}, r"cpu_affinity must be 'auto', 'none', 'numa:N' or a CPU list"),
        ({"cpu_affinity": "numa:x"}, r"cpu_affinity must be"),
        ({"timeout": 0}, r"timeout must be a positive number of seconds, got 0"),
        ({"db": -1}, r"db must be an integer in 0\.\.2147483647, got -1"),
        ({"max_capacity_gb": -1}, r"max_capacity_gb must be a number >= 0, got -1"),
        ({"max_capacity_gb": "abc"}, r"max_capacity_gb must be a number >= 0, got 'abc'"),
        ({"max_capacity_gb": float("inf")}, r"max_capacity_gb must be a number >= 0, got inf"),
        ({"max_capacity_gb": True}, r"max_capacity_gb must be a number >= 0, got True"),
        ({"eviction": {"trigger_watermark": 0}}, r"eviction\.trigger_watermark must be in \(0, 1\], got 0"),
        ({"eviction": {"trigger_watermark": 1.5}}, r"eviction\.trigger_watermark must be in \(0, 1\], got 1\.5"),
        ({"eviction": {"eviction_ratio": -0.1}}, r"eviction\.eviction_ratio must be in \(0, 1\], got -0\.1"),
        ({"eviction": {"eviction_ratio": "lots"}}, r"eviction\.eviction_ratio must be a number in \(0, 1\], got 'lots'"),
        ({"eviction": {"eviction_policy": "FIFO"}}, r"eviction\.eviction_policy must be one of 'LRU', 'noop', got 'FIFO'"),
        ({"eviction": 5}, r"eviction must be an object"),
        ({"trigger_watermak": 0.9}, r"unknown setting\(s\): 'trigger_watermak' \(did you mean 'eviction\.trigger_watermark'\?\)"),
        ({"eviction": {"trigger_watermak": 0.9}}, r"unknown eviction setting\(s\): 'trigger_watermak' \(did you mean 'trigger_watermark'\?\)"),
        ({"num_worker": 4, "hots": "h"}, r"unknown setting\(s\): 'hots' \(did you mean 'host'\?\), 'num_worker' \(did you mean 'num_workers'\?\)"),
    ],
)
def test_each_bad_field_is_an_error_naming_the_field_and_range(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        RespSettings.resolve(env=EMPTY, **fields)
    # The same through LMCache's JSON (what RespConnector(**adapter_params) receives). Port 0
    # is LMCache's "not set", and capacity keys in the flat "resp" form are LMCache's own.
    if fields.get("port") != 0 and not {"max_capacity_gb", "eviction"} & set(fields):
        with pytest.raises(InvalidInputError, match=message):
            RespSettings.from_lmcache(json.dumps({"type": "resp", **fields}), env=EMPTY)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"type": "s3", "host": "h"}, r"L2 adapter type must be one of 'native_plugin', 'resp', 'valkey', got 's3'"),
        ({"type": "native_plugin", "module_path": "other", "class_name": "X", "adapter_params": {}},
         r"selects other\.X, not lmcache_resp\.lmcache\.mp\.RespConnector"),
        ({"type": "native_plugin", "module_path": "lmcache_resp.lmcache.mp", "class_name": "RespConnector",
          "adapter_params": {}, "num_workers": 10}, r"unknown key\(s\) beside adapter_params .*'num_workers'"),
        # The alias kept for the path documented before the adapters moved, in a package never
        # released, is gone (#45): it names the module to use.
        ({"type": "native_plugin", "module_path": "lmcache_resp", "class_name": "RespConnector", "adapter_params": {}},
         r"selects lmcache_resp\.RespConnector, not lmcache_resp\.lmcache\.mp\.RespConnector"),
        ({"type": "native_plugin", "adapter_params": []}, r"adapter_params must be a JSON object"),
        ("[1, 2]", r"must be a JSON object, not list"),
        ("null", r"must be a JSON object, not NoneType"),
        ('{"host": "h", "password": "hunter2"', r"invalid L2 adapter JSON: .* at line 1 column"),
    ],
)
def test_lmcache_envelope_errors(config: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message) as info:
        RespSettings.from_lmcache(config, env=EMPTY)
    assert "hunter2" not in str(info.value)


def test_url_query_typos_are_errors_and_hide_the_password() -> None:
    with pytest.raises(InvalidInputError, match=r"'num_wrkers' \(did you mean 'num_workers'\?\)") as info:
        RespSettings.resolve("redis://u:hunter2@h:1?num_wrkers=4", env=EMPTY)
    assert "hunter2" not in str(info.value) and "redis://u:***@h:1" in str(info.value)


def test_eviction_without_capacity_is_accepted_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="lmcache_resp")
    s = RespSettings.resolve(env=EMPTY, eviction={"eviction_policy": "noop"})
    assert s.eviction.eviction_policy == "noop" and s.capacity_bytes == 0
    assert "no effect without max_capacity_gb" in caplog.text


def test_capacity_is_in_decimal_bytes_and_the_policy_is_kept() -> None:
    s = RespSettings.resolve(env=EMPTY, max_capacity_gb=1.5, eviction={"eviction_policy": "lru"})
    assert s.capacity_bytes == 3 << 29, "GiB, as LMCache counts max_capacity_gb"
    assert s.eviction == EvictionSettings("LRU", 0.8, 0.2)


def test_direct_construction_is_validated_too_and_reads_no_environment() -> None:
    with pytest.raises(InvalidInputError, match="num_workers must be an integer in 1..1024"):
        RespSettings(num_workers=0)
    assert RespSettings(password="plain").password == Secret("plain")
    assert RespSettings(eviction={"eviction_policy": "noop"}).eviction.eviction_policy == "noop"
    assert RespSettings(eviction=EvictionSettings("noop")).eviction.eviction_policy == "noop"
    with pytest.raises(InvalidInputError, match="eviction.eviction_ratio must be in"):
        EvictionSettings(eviction_ratio=2)
    # resolve() reads os.environ; the constructor reads only the env it is given.
    assert RespSettings(env={"LMCACHE_RESP_HOST": "env-host"}).host == "env-host"
    assert RespSettings().host == "localhost"


def test_every_default_lives_in_one_place() -> None:
    s = RespSettings()
    assert (s.timeout, s.connect_timeout, s.num_workers, s.connections_per_worker) == (10.0, 5.0, 8, 1)
    assert (s.max_inflight_bytes, s.max_inflight_requests, s.prefault, s.cluster) == (512 << 10, 256, True, False)
    # The connect timeout never exceeds the timeout, for every user of the settings alike.
    assert RespSettings(timeout=2).connect_timeout == 2.0
    assert RespSettings(timeout=2, connect_timeout=0.5).connect_timeout == 0.5


# -- secrets ------------------------------------------------------------------------------------


def test_secrets_never_print() -> None:
    for s in (
        RespSettings.resolve(env=EMPTY, password="hunter2"),
        RespSettings.resolve("redis://bob:hunter2@h:1", env=EMPTY),
        RespSettings.resolve(env={"LMCACHE_RESP_PASSWORD": "hunter2"}),
        RespSettings.from_lmcache({"type": "resp", "password": "hunter2"}, env=EMPTY),
    ):
        assert s.password == Secret("hunter2")
        for shown in (repr(s), str(s), repr(s.to_dict()), json.dumps(s.to_dict()), repr(s.password)):
            assert "hunter2" not in shown
        assert s.to_dict()["password"] == "***"
        assert s.password is not None and s.password.reveal() == "hunter2"


def test_env_password_is_read_once_at_construction() -> None:
    env = {"LMCACHE_RESP_PASSWORD": "first"}
    s = RespSettings.resolve(env=env)
    env["LMCACHE_RESP_PASSWORD"] = "second"
    assert s.password == Secret("first")


def test_unknown_keys_never_echo_values() -> None:
    with pytest.raises(InvalidInputError) as info:
        RespSettings.from_lmcache({"host": "h", "passwrd": "hunter2"}, env=EMPTY)
    assert "'passwrd' (did you mean 'password'?)" in str(info.value) and "hunter2" not in str(info.value)


def all_logged_text(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(f"{r.getMessage()} {r.args!r} {r.msg!r}" for r in caplog.records) + caplog.text


def test_no_log_line_holds_a_password(
    secure_server: RedisServer, clean_env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    default_pw, alice_pw = "s3cret-default-pw", "s3cret-alice-pw"
    with RespConnector(host="127.0.0.1", port=secure_server.port, password=default_pw, num_workers=2) as connector:
        assert connector.settings.password == Secret(default_pw)
        assert default_pw not in repr(connector) and default_pw not in repr(connector.settings)
    with PagedRespStore(
        f"redis://:{default_pw}@127.0.0.1:{secure_server.port}", page_size=4096, num_pages=2, num_workers=2
    ) as store:
        assert default_pw not in repr(store) and default_pw not in repr(store.settings)
    # Credentials from the environment, the JSON leaving them empty (LMCache's MP convention).
    clean_env.setenv("LMCACHE_RESP_USERNAME", "alice")
    clean_env.setenv("LMCACHE_RESP_PASSWORD", alice_pw)
    with RespConnector(host="127.0.0.1", port=secure_server.port, username="", password="", num_workers=2) as connector:
        assert connector.settings.username == "alice"
    with PagedRespStore(f"resp://127.0.0.1:{secure_server.port}", page_size=4096, num_pages=2, num_workers=2):
        pass
    logged = all_logged_text(caplog)
    assert "settings {" in logged and "'password': '***'" in logged, "the settings were logged"
    assert default_pw not in logged and alice_pw not in logged


def test_credentials_in_the_url_query_are_read_as_redis_py_reads_them_and_never_shown(
    secure_server: RedisServer, clean_env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue #42: ``redis://host:port?password=...`` (redis-py's form) was refused as an unknown
    parameter by a message showing the password, and that message lands in LMCache's log."""
    caplog.set_level(logging.DEBUG)
    default_pw, alice_pw = "s3cret-default-pw", "s3cret-alice-pw"
    port = secure_server.port
    url = f"redis://127.0.0.1:{port}/0?password={default_pw}&num_workers=2"
    assert RespSettings.resolve(url, env=EMPTY).password == Secret(default_pw)
    # redis-py's precedence: the user information wins; the first non-empty value counts.
    s = RespSettings.resolve(f"redis://alice:{alice_pw}@h:1?username=bob&password=other", env=EMPTY)
    assert (s.username, s.password) == ("alice", Secret(alice_pw))
    s = RespSettings.resolve("redis://h:1?password=&password=a+b%2Bc&password=later", env=EMPTY)
    assert s.password == Secret("a b+c")
    # The password reaches the server's AUTH: real connections, as alice and as the default user.
    with PagedRespStore(f"redis://127.0.0.1:{port}?username=alice&password={alice_pw}", page_size=4096,
                        num_pages=2, num_workers=2) as store:
        assert store.settings.username == "alice"
        shown = [repr(store), repr(store.settings), str(store.settings), json.dumps(store.settings.to_dict())]
    with RespConnector(url=url) as connector:
        shown += [repr(connector), repr(connector.settings), str(connector.settings.to_dict())]
    with pytest.raises(AuthenticationError):
        RespConnector(url=f"redis://127.0.0.1:{port}?username=alice&password=wrong-{alice_pw}", num_workers=1)
    # Every message naming such a URL shows none of its query values.
    for bad in (f"{url}&passwd={alice_pw}", f"redis://127.0.0.1:99999?password={default_pw}",
                f"redis://127.0.0.1:{port}?password={default_pw}&num_workers=zero"):
        with pytest.raises(InvalidInputError) as info:
            RespSettings.resolve(bad, env=EMPTY)
        shown.append(str(info.value))
    assert "password=***" in shown[-3] and "'passwd' (did you mean 'password'?)" in shown[-3], shown[-3]
    logged = all_logged_text(caplog)
    assert "'password': '***'" in logged, "the settings were logged"
    for text in [*shown, logged]:
        assert default_pw not in text and alice_pw not in text, text


def test_capacity_settings_reach_the_native_layer(redis_server: RedisServer, clean_env: pytest.MonkeyPatch) -> None:
    eviction = {"eviction_policy": "noop", "trigger_watermark": 0.5, "eviction_ratio": 0.25}
    settings = RespSettings.resolve(host="127.0.0.1", port=redis_server.port, num_workers=2,
                                    max_capacity_gb=2**-10, eviction=eviction)
    with RespConnector.from_settings(settings) as connector:
        stats = connector.capacity_stats
        assert stats is not None
        assert (stats["capacity_bytes"], str(stats["policy"]).lower()) == (1 << 20, "noop")
    with PagedRespStore(f"resp://127.0.0.1:{redis_server.port}?max_capacity_gb=0.001953125", page_size=4096,
                        num_pages=2, num_workers=2) as store:
        stats = store.capacity_stats
        assert stats is not None
        assert (stats["capacity_bytes"], str(stats["policy"]).lower()) == (2 << 20, "lru")
        assert {"stored_bytes", "reserved_bytes", "keys", "evictions", "evicted_bytes", "eviction_runs"} <= set(stats)


# -- connection fields: URLs, the environment, validation -----------------------------------------


def test_connection_defaults() -> None:
    s = RespSettings.resolve(env=EMPTY)
    assert (s.host, s.port, s.unix_path, s.username, s.password, s.db, s.timeout) == (
        "localhost", 6379, None, None, None, 0, 10.0,
    )


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("resp://h:1", {"host": "h", "port": 1}),
        ("redis://h", {"host": "h", "port": 6379}),
        ("redis://u:p%40ss@h:2/5", {"host": "h", "port": 2, "username": "u", "password": Secret("p@ss"), "db": 5}),
        ("redis://:pw@h:3", {"host": "h", "port": 3, "password": Secret("pw")}),
        ("redis://[::1]:4", {"host": "::1", "port": 4}),
        ("unix:///run/redis.sock", {"unix_path": "/run/redis.sock", "host": None}),
        ("unix:///run/redis.sock?db=2", {"unix_path": "/run/redis.sock", "db": 2}),
        ("redis://u:pa/ss#w?rd@h:7/1", {"host": "h", "port": 7, "password": Secret("pa/ss#w?rd"), "db": 1}),
    ],
)
def test_urls(url: str, expected: dict[str, object]) -> None:
    s = RespSettings.resolve(url, env=EMPTY)
    assert {k: getattr(s, k) for k in expected} == expected


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("rediss://h:1?ssl=false", "contradicts its rediss:// scheme"),
        ("http://h", "unsupported URL scheme"),
        ("redis://h:99999", "invalid URL"),
        ("redis://h/notadb", "non-negative integer"),
        ("unix://", "no socket path"),
        ("redis://:1", "has no host"),
    ],
)
def test_bad_urls(url: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        RespSettings.resolve(url, env=EMPTY)


@pytest.mark.parametrize("password", ["topsecret", "top/secret", "top#secret", "top?secret", "t/o#p?s"])
def test_url_errors_never_show_the_password(password: str) -> None:
    for url in (f"rediss://user:{password}@h:1?ssl=false", f"redis://user:{password}@h:99999",
                f"redis://user:{password}@h/x", f"https://user:{password}@h:1",
                f"redis://user:{password}@h:1?bogus=1"):
        with pytest.raises(InvalidInputError) as info:
            RespSettings.resolve(url, env=EMPTY)
        assert password not in str(info.value), url
        assert "***" in str(info.value) or "user" not in str(info.value), url


def test_valkey_startup_nodes_holding_credentials_are_refused_without_showing_them() -> None:
    # LMCache's valkey adapter reads host:port entries only. Credentials written there were
    # glued into a URL as they came: "default:hunter2@h:6379" became the user "[default" at
    # host "h]", and the password was taken in silence.
    for nodes in ("default:hunter2@h:6379", "rediss://default:hunter2@h:6379", "hunter2@h:6379,h2:1", "u:hunter2@h:x"):
        for cluster_mode in (False, True):
            with pytest.raises(InvalidInputError) as info:
                RespSettings.resolve(None, env=EMPTY, startup_nodes=nodes, cluster_mode=cluster_mode)
            text = str(info.value)
            assert "hunter2" not in text and "default" not in text, text
            assert "an entry holds '@' or '/'" in text and "username and password" in text, text


def test_unix_socket_selection() -> None:
    s = RespSettings.resolve("unix:///run/r.sock", env={"LMCACHE_RESP_HOST": "ignored"})
    assert (s.unix_path, s.host) == ("/run/r.sock", None)
    assert s.endpoint == "unix:/run/r.sock"
    # Explicit host/port win over a unix URL.
    s = RespSettings.resolve("unix:///run/r.sock", env=EMPTY, host="h", port=1)
    assert (s.unix_path, s.host, s.port) == (None, "h", 1)
    with pytest.raises(InvalidInputError, match="not both"):
        RespSettings.resolve(env=EMPTY, host="h", unix_path="/run/x")


@pytest.mark.parametrize(
    ("kwargs", "env", "message"),
    [
        ({"port": True}, EMPTY, "port must be an integer"),
        ({}, {"LMCACHE_RESP_PORT": "http"}, "LMCACHE_RESP_PORT must be an integer in 1..65535"),
        ({"timeout": float("nan")}, EMPTY, "timeout must be a positive number"),
        ({"host": 5}, EMPTY, "host must be a str, not int"),
        ({"password": 5}, EMPTY, "password must be a str, not int"),
        ({"num_workers": [1]}, EMPTY, r"num_workers must be an integer in 1\.\.1024, got \[1\]"),
        ({"prefault": "maybe"}, EMPTY, "prefault must be true or false, got 'maybe'"),
    ],
)
def test_invalid_values_name_the_field_and_range(kwargs: dict[str, object], env: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        RespSettings.resolve(env=env, **kwargs)


def test_secret_values_never_print_and_never_pickle() -> None:
    import pickle

    s = RespSettings.resolve(env=EMPTY, password="hunter2", username="bob")
    assert "hunter2" not in repr(s) and "hunter2" not in str(s)
    assert repr(s.password) == "Secret('***')" and str(s.password) == "***"
    assert s.password is not None and s.password.reveal() == "hunter2"
    with pytest.raises(TypeError, match="not picklable"):
        pickle.dumps(s.password)
    with pytest.raises(InvalidInputError, match="password must be a str, not int"):
        Secret(5)  # type: ignore[arg-type]
