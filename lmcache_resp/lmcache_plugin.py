"""LMCache's non-MP remote-storage plugin: ``RespRemoteConnector``.

LMCache (0.5.6) loads third-party remote backends in single-process mode through
``remote_storage_plugins`` and two ``extra_config`` keys per plugin::

    remote_storage_plugins: ["resp"]
    extra_config:
      remote_storage_plugin.resp.module_path: lmcache_resp.lmcache_plugin
      remote_storage_plugin.resp.class_name: RespRemoteConnector
      remote_storage_plugin.resp.host: 127.0.0.1       # every RespSettings field, see below
      remote_storage_plugin.resp.port: 6379

(leave ``remote_url`` unset: LMCache builds one RemoteBackend per plugin name and another one
for ``remote_url``). LMCache imports this module, takes ``RespRemoteConnector`` (a subclass of
its ``RemoteConnector``), wraps it in its ``DynamicConnectorAdapter`` and builds it as
``RespRemoteConnector(loop=..., local_cpu_backend=..., config=...)``.

Settings come from the ``remote_storage_plugin.<name>.<field>`` keys, with the conventions of
``RespConnector(**adapter_params)``: ``url``, ``host``, ``port``, ``unix_path``, ``username``,
``password``, ``db``, ``timeout``, ``num_workers`` (or ``resp_num_threads``),
``connections_per_worker``, ``cpu_affinity``, ``max_capacity_gb`` and ``eviction`` (a mapping),
and TLS's: ``ssl`` (or a ``rediss://`` url), ``ssl_ca_certs``, ``ssl_ca_path``, ``ssl_certfile``,
``ssl_keyfile``, ``ssl_check_hostname``, ``ssl_cert_reqs`` and ``ssl_server_name``.
An empty value means "not set", so ``LMCACHE_RESP_HOST/PORT/USERNAME/PASSWORD`` (and, with TLS
on, ``LMCACHE_RESP_SSL_CA_CERTS/CERTFILE/KEYFILE``) fill it in; keep credentials there
(LMCache logs its configuration). Unknown keys are errors.

Values are stored as the raw bytes of LMCache's memory objects (no header), as LMCache's own
``resp://`` connector stores them; the memory objects' ``byte_array`` views go to the native
connector, which reads and writes them in place (no copies). Chunks are whole chunks:
``save_unfull_chunk`` and ``use_layerwise`` are refused.

In non-MP mode LMCache has no eviction controller for remote backends, so capacity and
eviction (``max_capacity_gb``/``eviction``) belong to this connector.

``import lmcache_resp`` never imports LMCache, and neither does importing this module:
LMCache is imported when ``RespRemoteConnector`` is first looked up.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import threading
import types
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from lmcache_resp.connector import RespConnector
from lmcache_resp.errors import InvalidInputError
from lmcache_resp.lmcache import RespConnectorClient
from lmcache_resp.settings import RespSettings

__all__ = [
    "PLUGIN_CLASS",
    "PLUGIN_MODULE",
    "RespRemoteConnector",
    "remote_connector_class",
    "settings_from_lmcache_config",
]

logger = logging.getLogger("lmcache_resp")

PLUGIN_MODULE = "lmcache_resp.lmcache_plugin"
PLUGIN_CLASS = "RespRemoteConnector"

_PREFIX = "remote_storage_plugin."
_LOADER_KEYS = frozenset({"module_path", "class_name"})

# The class has a method named ``list``: its annotations use these names.
_Objs = list[Any]
_Strs = list[str]

_class_lock = threading.Lock()
_built_class: type | None = None


def __getattr__(name: str) -> Any:
    # PEP 562: LMCache's loader does getattr(module, "RespRemoteConnector").
    if name == PLUGIN_CLASS:
        return remote_connector_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def remote_connector_class() -> type:
    """``RespRemoteConnector``: built (and LMCache imported) on first use."""
    global _built_class
    with _class_lock:
        if _built_class is None:
            base = importlib.import_module("lmcache.v1.storage_backend.connector.base_connector")
            _built_class = types.new_class(
                PLUGIN_CLASS, (_RespRemoteConnectorImpl, base.RemoteConnector), {},
                lambda ns: ns.update({"__module__": __name__, "__qualname__": PLUGIN_CLASS,
                                      "__doc__": _RespRemoteConnectorImpl.__doc__}),
            )
        return _built_class


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
