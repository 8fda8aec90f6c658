"""SGLang HiCache's L3 storage backend on Redis/Valkey: ``RespHiCacheStorage``.

SGLang (0.5.x) builds a storage backend that lives outside it through its ``dynamic`` loader::

    --enable-hierarchical-cache --hicache-mem-layout page_first \\
    --hicache-storage-backend dynamic \\
    --hicache-storage-backend-extra-config '{"backend_name": "resp", "module_path": "lmcache_resp.sglang",
        "class_name": "RespHiCacheStorage", "interface_v1": 1, "url": "redis://10.0.0.5:6379"}'

SGLang imports this module, takes ``RespHiCacheStorage`` (a subclass of its ``HiCacheStorage``,
built on first use so that this package imports without SGLang) and builds it as
``RespHiCacheStorage(storage_config, kwargs)``; ``"interface_v1": 1`` makes SGLang's cache
controller call the zero-copy ``batch_get_v1``/``batch_set_v1``. The host pool's buffers are
registered with the I/O engine once (``register_mem_pool_host``); each batch is then a list of
``(offset, length)`` ranges of them, computed without a Python loop per page, and the I/O
threads move every page's bytes between the pool and the socket with the GIL released.

Our settings sit in the same JSON (``url`` or ``host``/``port``, ``num_workers``, ``timeout``,
cluster, Sentinel, TLS, ``key_prefix``, ``ttl_seconds``, ``read_from``, ``max_capacity_gb``,
...), credentials in ``LMCACHE_RESP_USERNAME``/``LMCACHE_RESP_PASSWORD`` (SGLang logs its
configuration). docs/sglang.md has the keys, the layouts and the measurements.
"""

from __future__ import annotations

import threading
import types
from typing import TYPE_CHECKING, Any

from lmcache_resp.sglang._storage import RespHiCacheStorageImpl

__all__ = ["BACKEND_CLASS", "BACKEND_MODULE", "RespHiCacheStorage", "storage_class"]

BACKEND_MODULE = "lmcache_resp.sglang"
BACKEND_CLASS = "RespHiCacheStorage"
_BASE_MODULE = "sglang.srt.mem_cache.hicache_storage"

_class_lock = threading.Lock()
_built_class: type | None = None


def __getattr__(name: str) -> Any:
    # PEP 562: SGLang's loader does getattr(importlib.import_module(module_path), class_name).
    if name == BACKEND_CLASS:
        return storage_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def storage_class() -> type:
    """``RespHiCacheStorage``: our implementation under SGLang's ``HiCacheStorage`` (imported
    here, on first use)."""
    global _built_class
    with _class_lock:
        if _built_class is None:
            import importlib

            base = importlib.import_module(_BASE_MODULE).HiCacheStorage
            _built_class = types.new_class(
                BACKEND_CLASS, (RespHiCacheStorageImpl, base), {},
                lambda ns: ns.update({"__module__": __name__, "__qualname__": BACKEND_CLASS,
                                      "__doc__": RespHiCacheStorageImpl.__doc__}),
            )
        return _built_class


if TYPE_CHECKING:  # for type checkers and readers: the name SGLang looks up
    RespHiCacheStorage = RespHiCacheStorageImpl
