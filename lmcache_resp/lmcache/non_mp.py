"""LMCache's non-MP mode (LMCache inside the vLLM process): ``RespRemoteConnector``, the remote
storage plugin LMCache loads, and ``RespConnectorClient``, the asyncio client it drives a
:class:`~lmcache_resp.lmcache.mp.RespConnector` through.

The plugin. LMCache (0.5.6, 0.5.7) loads third-party remote backends in single-process mode through
``remote_storage_plugins`` and two ``extra_config`` keys per plugin::

    remote_storage_plugins: ["resp"]
    extra_config:
      remote_storage_plugin.resp.module_path: lmcache_resp.lmcache.non_mp
      remote_storage_plugin.resp.class_name: RespRemoteConnector
      remote_storage_plugin.resp.host: 127.0.0.1       # every RespSettings field, see below
      remote_storage_plugin.resp.port: 6379

(leave ``remote_url`` unset: LMCache builds one RemoteBackend per plugin name and another one for
``remote_url``). LMCache imports this module, takes ``RespRemoteConnector`` (a subclass of its
``RemoteConnector``), wraps it in its ``DynamicConnectorAdapter`` and builds it as
``RespRemoteConnector(loop=..., local_cpu_backend=..., config=...)``.

Settings come from the ``remote_storage_plugin.<name>.<field>`` keys, with the conventions of
``RespConnector(**adapter_params)``: ``url``, ``host``, ``port``, ``unix_path``, ``username``,
``password``, ``db``, ``timeout``, ``num_workers`` (or ``resp_num_threads``),
``connections_per_worker``, ``cpu_affinity``, ``max_capacity_gb`` and ``eviction`` (a mapping),
TLS's: ``ssl`` (or a ``rediss://`` url), ``ssl_ca_certs``, ``ssl_ca_path``, ``ssl_certfile``,
``ssl_keyfile``, ``ssl_check_hostname``, ``ssl_cert_reqs`` and ``ssl_server_name``, a namespace
and an expiry: ``key_prefix`` (keys as ``<key_prefix>@<key>``) and ``ttl_seconds`` (not with
``max_capacity_gb``), LMCache's ``valkey``-adapter names for ours (``startup_nodes``,
``cluster_mode``, ``tls_enable``, ``database_id``, ``request_timeout``, ``connection_timeout``),
Sentinel's: ``sentinel_nodes``, ``sentinel_service_name``, ``sentinel_username``,
``sentinel_password`` and ``sentinel_tls`` (or a ``redis+sentinel://`` url), and ``read_from``.
An empty value means "not set", so ``LMCACHE_RESP_HOST/PORT/USERNAME/PASSWORD`` (and, with TLS
on, ``LMCACHE_RESP_SSL_CA_CERTS/CERTFILE/KEYFILE``) fill it in; keep credentials there
(LMCache logs its configuration). Unknown keys are errors.

Values are stored as the raw bytes of LMCache's memory objects (no header), as LMCache's own
``resp://`` connector stores them; the memory objects' ``byte_array`` views go to the native
connector, which reads and writes them in place (no copies). Chunks are whole chunks:
``save_unfull_chunk`` and ``use_layerwise`` are refused.

In non-MP mode LMCache has no eviction controller for remote backends, so capacity and
eviction (``max_capacity_gb``/``eviction``) belong to this connector.

The client. :class:`RespConnectorClient` has ``ConnectorClientBase`` semantics: it drives a
RespConnector from one asyncio event loop, its completion router watching the connector's
eventfd with ``loop.add_reader`` and resolving one future per submitted batch. The ``*_sync``
variants block the calling thread instead and may be called from any thread other than the
loop's, while the loop runs; their futures are registered before the batch is submitted, so no
completion is ever lost (unlike LMCache's ``ConnectorClientBase``, see docs/lmcache.md). What a
batch returns:

- ``batch_get`` -> one bool per key (True = the whole value was read into its buffer). A miss
  is False, never an exception, and so is a value whose length is not the buffer's (LMCache's
  chunks have fixed sizes). A key that failed (its connection broke, say) is False as well,
  and a warning names it and its error: LMCache's MP mode reads ``per_key`` even when the
  batch is not ok, and this client does the same.
- ``batch_set`` -> None, or :class:`~lmcache_resp.errors.ConnectorError` carrying the failures.
- ``batch_exists`` -> one bool per key, or ConnectorError if any key failed.
- ``batch_delete`` -> one bool per key (True = it existed and is gone), or ConnectorError if
  any key failed.

The connector holds a batch's buffers until its completion has been drained.

``import lmcache_resp`` never imports LMCache, and neither does importing this module:
LMCache is imported when ``RespRemoteConnector`` is first looked up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from lmcache_resp._lazy_base import LazySubclass, import_attribute, module_getattr
from lmcache_resp._lifecycle import Closeable
from lmcache_resp._native import BatchResult
from lmcache_resp.errors import ClosedError, ConnectorError, InvalidInputError
from lmcache_resp.lmcache.mp import RespConnector
from lmcache_resp.settings import RespSettings
from lmcache_resp.stats import Stats

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from lmcache_resp._typing import SettingsKwargs

__all__ = [
    "PLUGIN_CLASS",
    "PLUGIN_MODULE",
    "RespConnectorClient",
    "RespRemoteConnector",
    "remote_connector_class",
    "settings_from_lmcache_config",
]

logger = logging.getLogger("lmcache_resp")


# -- the client: ConnectorClientBase semantics on asyncio ------------------------------------------


class RespConnectorClient(Closeable):
    """``ConnectorClientBase`` semantics over a :class:`~lmcache_resp.RespConnector`, on one
    asyncio loop.

    ``RespConnectorClient(connector, loop=None)`` takes ownership of ``connector``
    (``close()`` closes it); without ``loop``, the running loop is used. ``from_settings``
    builds the connector from a :class:`~lmcache_resp.settings.RespSettings`, a URL or
    LMCache's JSON.
    """

    def __init__(self, connector: RespConnector, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop if loop is not None else _running_loop_or_fail()
        self._connector = connector
        self._router = connector.router
        self._closed = False
        self._on_loop_thread(lambda: self._router.watch(self._loop))

    @classmethod
    def from_settings(
        cls,
        settings: RespSettings | str | Mapping[str, Any],
        loop: asyncio.AbstractEventLoop | None = None,
        **given: Unpack[SettingsKwargs],
    ) -> RespConnectorClient:
        """A client over a new :class:`~lmcache_resp.RespConnector`: ``settings`` is a
        RespSettings, a URL (``resp://host:port``, ``rediss://host:6380``) or LMCache's L2
        adapter config (dict). With a URL, keyword settings (``ssl_ca_certs=...``) override
        it; a RespSettings or a config holds its own."""
        explicit: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        if isinstance(settings, str):
            settings = RespSettings.from_url(settings, **explicit)
        elif explicit:
            raise InvalidInputError(
                f"keyword settings ({', '.join(sorted(explicit))}) go with a URL: put them in the "
                f"{'RespSettings' if isinstance(settings, RespSettings) else 'LMCache config'} instead"
            )
        elif not isinstance(settings, RespSettings):
            settings = RespSettings.from_lmcache(settings)
        # The loop is checked before a connector (threads, connections) exists.
        loop = loop if loop is not None else _running_loop_or_fail()
        return cls(RespConnector.from_settings(settings), loop)

    # -- asyncio ---------------------------------------------------------------------------------

    async def batch_get(self, keys: Sequence[str], bufs: Sequence[Any]) -> list[bool]:
        """Reads each key into its buffer: True = hit; a miss or a failed key is False."""
        return _get_hits(keys, await self._submit_async("get", lambda: self._connector.submit_batch_get(keys, bufs)))

    async def batch_set(self, keys: Sequence[str], bufs: Sequence[Any]) -> None:
        _raise_failures(await self._submit_async("set", lambda: self._connector.submit_batch_set(keys, bufs)))

    async def batch_exists(self, keys: Sequence[str]) -> list[bool]:
        result = await self._submit_async("exists", lambda: self._connector.submit_batch_exists(keys))
        return _raise_failures(result).hits

    async def batched_exists(self, keys: Sequence[str]) -> list[bool]:
        """LMCache's other name for :meth:`batch_exists`."""
        return await self.batch_exists(keys)

    async def batch_delete(self, keys: Sequence[str]) -> list[bool]:
        """Deletes each key: True where it existed. Through the connector, so its capacity
        tracker sees the deletes."""
        result = await self._submit_async("delete", lambda: self._connector.submit_batch_delete(keys))
        return _raise_failures(result).hits

    async def delete(self, key: str) -> bool:
        return (await self.batch_delete([key]))[0]

    async def get(self, key: str, buf: Any) -> bool:
        return (await self.batch_get([key], [buf]))[0]

    async def set(self, key: str, buf: Any) -> None:
        await self.batch_set([key], [buf])

    async def exists(self, key: str) -> bool:
        return (await self.batch_exists([key]))[0]

    # -- blocking, from threads other than the loop's ---------------------------------------------

    def batch_get_sync(self, keys: Sequence[str], bufs: Sequence[Any]) -> list[bool]:
        return _get_hits(keys, self._submit_blocking("get", lambda: self._connector.submit_batch_get(keys, bufs)))

    def batch_set_sync(self, keys: Sequence[str], bufs: Sequence[Any]) -> None:
        _raise_failures(self._submit_blocking("set", lambda: self._connector.submit_batch_set(keys, bufs)))

    def batch_exists_sync(self, keys: Sequence[str]) -> list[bool]:
        return _raise_failures(self._submit_blocking("exists", lambda: self._connector.submit_batch_exists(keys))).hits

    def batched_exists_sync(self, keys: Sequence[str]) -> list[bool]:
        return self.batch_exists_sync(keys)

    def batch_delete_sync(self, keys: Sequence[str]) -> list[bool]:
        return _raise_failures(self._submit_blocking("delete", lambda: self._connector.submit_batch_delete(keys))).hits

    def delete_sync(self, key: str) -> bool:
        return self.batch_delete_sync([key])[0]

    def get_sync(self, key: str, buf: Any) -> bool:
        return self.batch_get_sync([key], [buf])[0]

    def set_sync(self, key: str, buf: Any) -> None:
        self.batch_set_sync([key], [buf])

    def exists_sync(self, key: str) -> bool:
        return self.batch_exists_sync([key])[0]

    # -- lifecycle ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Closes the connector, which completes or fails every batch in flight and delivers
        those completions; later calls raise ClosedError. Idempotent; callable from any
        thread."""
        if self._closed:
            return
        self._closed = True
        self._connector.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def stats(self) -> Stats:
        """The connector's counters (docs/observability.md)."""
        return self._connector.stats()

    @property
    def connector(self) -> RespConnector:
        return self._connector

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self._router.pending()} pending"
        return f"RespConnectorClient({self._connector!r}, {state})"

    # -- internals -------------------------------------------------------------------------------

    def _submit_async(self, op: str, submit: Callable[[], int]) -> asyncio.Future[BatchResult]:
        if _running_loop() is not self._loop:
            raise RuntimeError("RespConnectorClient: await its methods on the loop it was built with")
        self._check_open(op)
        return self._router.submit_async(submit)

    def _submit_blocking(self, op: str, submit: Callable[[], int]) -> BatchResult:
        if _running_loop() is self._loop:
            raise RuntimeError("RespConnectorClient: the *_sync methods would block the event loop; await the async ones")
        self._check_open(op)
        return self._router.submit_blocking(submit, self._loop)

    def _check_open(self, op: str) -> None:
        if self._closed:
            raise ClosedError(f"batch_{op}: the client is closed")

    def _on_loop_thread(self, action: Callable[[], object]) -> None:
        """Runs ``action`` now when safe (on the loop's thread, or the loop is not running),
        else hands it to the loop (add_reader is not thread-safe)."""
        if _running_loop() is self._loop or not self._loop.is_running():
            action()
        else:
            self._loop.call_soon_threadsafe(action)


def _get_hits(keys: Sequence[str], result: BatchResult) -> list[bool]:
    """GET's per-key bits; failed keys count as misses and are named in a warning."""
    if not result.ok:
        named = ", ".join(repr(keys[i]) for i, _ in result.failures[:3]) + (" ..." if len(result.failures) > 3 else "")
        logger.warning("batch_get: failed keys count as misses (%s): %s", named, result.error)
    return result.hits


def _raise_failures(result: BatchResult) -> BatchResult:
    if not result.ok:
        raise ConnectorError(f"batch_{result.op}: {result.error}")
    return result


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _running_loop_or_fail() -> asyncio.AbstractEventLoop:
    loop = _running_loop()
    if loop is None:
        raise RuntimeError("RespConnectorClient needs an event loop: pass loop=, or build it inside a coroutine")
    return loop


# -- the plugin: LMCache's RemoteConnector -----------------------------------------------------


PLUGIN_MODULE = "lmcache_resp.lmcache.non_mp"
PLUGIN_CLASS = "RespRemoteConnector"

_PREFIX = "remote_storage_plugin."
_LOADER_KEYS = frozenset({"module_path", "class_name"})

# The class has a method named ``list``: its annotations use these names.
_Objs = list[Any]
_Strs = list[str]

def remote_connector_class() -> type:
    """``RespRemoteConnector``: built (and LMCache imported) on first use."""
    return _CLASS.get()


# -- configuration -------------------------------------------------------------------------------


def plugin_names(config: Any) -> list[str]:
    """The entries of ``config.remote_storage_plugins`` that load this class."""
    extra: Mapping[str, Any] = getattr(config, "extra_config", None) or {}
    return [
        name for name in (getattr(config, "remote_storage_plugins", None) or [])
        if extra.get(f"{_PREFIX}{name}.module_path") == PLUGIN_MODULE
        and extra.get(f"{_PREFIX}{name}.class_name") == PLUGIN_CLASS
    ]


def settings_from_lmcache_config(config: Any, plugin_name: str | None = None) -> RespSettings:
    """Our settings from LMCache's engine config: the ``remote_storage_plugin.<name>.*`` keys
    of ``extra_config`` (read like ``adapter_params``), then ``LMCACHE_RESP_*``, then defaults."""
    if plugin_name is None:
        names = plugin_names(config)
        if not names:
            raise InvalidInputError(
                f"no remote_storage_plugins entry loads {PLUGIN_MODULE}.{PLUGIN_CLASS}: add one, e.g. "
                f"remote_storage_plugins: [resp] and extra_config keys "
                f"remote_storage_plugin.resp.module_path / .class_name"
            )
        if len(names) > 1:
            # LMCache's DynamicConnectorAdapter does not tell a connector which plugin entry it serves.
            raise InvalidInputError(
                f"{len(names)} remote_storage_plugins entries load {PLUGIN_CLASS} ({', '.join(map(repr, names))}); "
                "LMCache cannot tell them apart: configure one"
            )
        plugin_name = names[0]
    prefix = f"{_PREFIX}{plugin_name}."
    extra: Mapping[str, Any] = getattr(config, "extra_config", None) or {}
    params = {
        key[len(prefix):]: value for key, value in extra.items()
        if isinstance(key, str) and key.startswith(prefix) and key[len(prefix):] not in _LOADER_KEYS
    }
    try:
        return RespSettings.from_adapter_params(params, lmcache_evicts=False)
    except InvalidInputError as exc:
        raise InvalidInputError(f"extra_config {prefix}*: {exc}") from None


def _check_supported(config: Any) -> None:
    if getattr(config, "save_unfull_chunk", False):
        raise InvalidInputError(
            f"{PLUGIN_CLASS} stores whole chunks: set save_unfull_chunk: false (as for LMCache's resp:// connector)"
        )
    if getattr(config, "use_layerwise", False):
        raise InvalidInputError(f"{PLUGIN_CLASS} does not support use_layerwise: true")
    extra: Mapping[str, Any] = getattr(config, "extra_config", None) or {}
    if extra.get("save_chunk_meta") is True:
        raise InvalidInputError(
            f"{PLUGIN_CLASS} stores raw KV bytes without a metadata header: set save_chunk_meta: false (or leave it out)"
        )


def _hit_prefix(bits: Sequence[bool]) -> int:
    """How many keys hit, counted from the first until the first miss (LMCache's contains)."""
    count = 0
    for bit in bits:
        if not bit:
            break
        count += 1
    return count


# -- the connector -------------------------------------------------------------------------------


class _RespRemoteConnectorImpl:
    """LMCache ``RemoteConnector`` over :class:`~lmcache_resp.RespConnector` (non-MP mode).

    Built by LMCache as ``RespRemoteConnector(loop=, local_cpu_backend=, config=)``; for direct
    use, ``metadata=``, ``plugin_name=`` (which ``remote_storage_plugin.<name>.*`` keys to read)
    or ``settings=`` (a :class:`~lmcache_resp.RespSettings`, instead of those keys) may be
    given. Its batches complete on ``loop`` through :class:`~lmcache_resp.RespConnectorClient`
    (eventfd + ``add_reader``).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        local_cpu_backend: Any,
        config: Any,
        *,
        metadata: Any = None,
        plugin_name: str | None = None,
        settings: RespSettings | None = None,
    ) -> None:
        _check_supported(config)
        if metadata is None:
            metadata = getattr(local_cpu_backend, "metadata", None)
        # Scheduler-role workers get a stand-in backend with no metadata: they only ask EXISTS.
        self._can_get = metadata is not None
        if self._can_get:
            # RemoteConnector.__init__: meta_shapes, meta_dtypes, meta_fmt, full_chunk_size_bytes.
            cast(Any, super()).__init__(config, metadata)
        self._loop = loop
        self._local_cpu_backend = local_cpu_backend
        self._settings = settings if settings is not None else settings_from_lmcache_config(config, plugin_name)
        connector = RespConnector.from_settings(self._settings)
        try:
            self._client = RespConnectorClient(connector, loop)
        except BaseException:
            connector.close()
            raise

    # -- LMCache's RemoteConnector interface --------------------------------------------------

    async def exists(self, key: Any) -> bool:
        return await self._client.exists(key.to_string())

    def exists_sync(self, key: Any) -> bool:
        return self._client.exists_sync(key.to_string())

    async def get(self, key: Any) -> Any:
        """A memory object from LMCache's allocator holding the value, or None (a miss, or no
        memory free)."""
        return (await self._get_many([key]))[0]

    async def put(self, key: Any, memory_obj: Any) -> None:
        """Stores ``memory_obj``'s bytes. LMCache's InstrumentedRemoteConnector drops the
        caller's reference afterwards; ours is held until the I/O is done, cancelled or not."""
        await self._io(self._client.set(key.to_string(), memory_obj.byte_array), [memory_obj])

    def support_batched_put(self) -> bool:
        return True

    async def batched_put(self, keys: Sequence[Any], memory_objs: Sequence[Any]) -> None:
        views = [obj.byte_array for obj in memory_objs]
        await self._io(self._client.batch_set([k.to_string() for k in keys], views), list(memory_objs))

    def support_batched_get(self) -> bool:
        return True

    async def batched_get(self, keys: Sequence[Any]) -> _Objs:
        return await self._get_many(keys)

    def support_batched_contains(self) -> bool:
        return True

    def batched_contains(self, keys: Sequence[Any]) -> int:
        """From LMCache's worker threads (never the loop's)."""
        return _hit_prefix(self._client.batch_exists_sync([k.to_string() for k in keys]))

    def support_batched_async_contains(self) -> bool:
        return True

    async def batched_async_contains(self, lookup_id: str, keys: Sequence[Any], pin: bool = False) -> int:
        return _hit_prefix(await self._client.batch_exists([k.to_string() for k in keys]))

    def support_batched_get_non_blocking(self) -> bool:
        return True

    async def batched_get_non_blocking(self, lookup_id: str, keys: Sequence[Any]) -> _Objs:
        """The leading hits; objects after the first miss are released."""
        objs = await self._get_many(keys)
        hits = _hit_prefix([obj is not None for obj in objs])
        for obj in objs[hits:]:
            if obj is not None:
                obj.ref_count_down()
        return objs[:hits]

    def remove_sync(self, key: Any) -> bool:
        """DEL through the connector (its capacity tracker sees it), from LMCache's caller
        thread; on the event loop's own thread it would block the loop, so it is refused there
        (LMCache's RemoteBackend logs that and reports False)."""
        return self._client.delete_sync(key.to_string())

    async def list(self) -> _Strs:
        raise NotImplementedError(f"{PLUGIN_CLASS} does not list keys")

    async def close(self) -> None:
        self._client.close()

    # -- extras ----------------------------------------------------------------------------

    @property
    def settings(self) -> RespSettings:
        return self._settings

    @property
    def client(self) -> RespConnectorClient:
        return self._client

    @property
    def capacity_stats(self) -> dict[str, Any] | None:
        connector = self._client.connector
        return connector.capacity_stats if isinstance(connector, RespConnector) else None

    def __repr__(self) -> str:
        tls = ", tls" if self._settings.ssl else ""
        return f"{PLUGIN_CLASS}({self._settings.endpoint!r}{tls}, num_workers={self._settings.num_workers})"

    # -- internals ---------------------------------------------------------------------------

    async def _get_many(self, keys: Sequence[Any]) -> _Objs:
        if not self._can_get:
            raise RuntimeError(f"{PLUGIN_CLASS}: no LMCache metadata here (scheduler role): GET is not available")
        backend = self._local_cpu_backend
        self_any = cast(Any, self)
        objs: _Objs = []
        for _ in keys:
            # busy_loop=False: this runs on LMCache's event loop, which must not sleep.
            obj = backend.allocate(self_any.meta_shapes, self_any.meta_dtypes, self_any.meta_fmt, busy_loop=False)
            objs.append(obj)
        wanted = [(i, obj) for i, obj in enumerate(objs) if obj is not None]
        if len(wanted) < len(objs):
            logger.warning("%s: no free memory for %d of %d chunks: they count as misses",
                           PLUGIN_CLASS, len(objs) - len(wanted), len(objs))
        if not wanted:
            return objs
        held = [obj for _, obj in wanted]
        try:
            bits = await self._io(
                self._client.batch_get([keys[i].to_string() for i, _ in wanted], [obj.byte_array for obj in held]),
                held,
            )
        except BaseException:
            for obj in held:
                obj.ref_count_down()
            raise
        for (i, obj), hit in zip(wanted, bits, strict=True):
            if not hit:
                obj.ref_count_down()
                objs[i] = None
        return objs

    @staticmethod
    async def _io(io: Awaitable[Any], held: Sequence[Any]) -> Any:
        """Awaits ``io`` holding a reference on each memory object until the native side is
        done with its buffer, even when the caller is cancelled (LMCache cancels timed-out
        gets): the allocator must not hand the memory out while a worker thread still uses it."""
        for obj in held:
            obj.ref_count_up()
        task = asyncio.ensure_future(io)
        task.add_done_callback(_releaser(held))
        return await asyncio.shield(task)


def _releaser(held: Sequence[Any]) -> Callable[[asyncio.Future[Any]], None]:
    def release(task: asyncio.Future[Any]) -> None:
        if not task.cancelled():
            task.exception()  # retrieved: the awaiting caller (if any) sees it
        for obj in held:
            obj.ref_count_down()

    return release


if TYPE_CHECKING:  # for type checkers and readers: the name LMCache looks up
    RespRemoteConnector = _RespRemoteConnectorImpl


_CLASS = LazySubclass(
    PLUGIN_CLASS, _RespRemoteConnectorImpl, __name__,
    base=import_attribute("lmcache.v1.storage_backend.connector.base_connector", "RemoteConnector"),
)
# PEP 562: LMCache's loader does getattr(module, "RespRemoteConnector").
__getattr__ = module_getattr(__name__, _CLASS)
