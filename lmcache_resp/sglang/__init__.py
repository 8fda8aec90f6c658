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

from typing import TYPE_CHECKING

from lmcache_resp._lazy_base import LazySubclass, import_attribute, module_getattr
from lmcache_resp.sglang._storage import RespHiCacheStorageImpl

__all__ = ["BACKEND_CLASS", "BACKEND_MODULE", "RespHiCacheStorage", "storage_class"]

BACKEND_MODULE = "lmcache_resp.sglang"
BACKEND_CLASS = "RespHiCacheStorage"

_CLASS = LazySubclass(
    BACKEND_CLASS, RespHiCacheStorageImpl, __name__,
    base=import_attribute("sglang.srt.mem_cache.hicache_storage", "HiCacheStorage"),
)
# PEP 562: SGLang's loader does getattr(importlib.import_module(module_path), class_name).
__getattr__ = module_getattr(__name__, _CLASS)


def storage_class() -> type:
    """``RespHiCacheStorage``: our implementation under SGLang's ``HiCacheStorage`` (imported
    here, on first use)."""
    return _CLASS.get()


if TYPE_CHECKING:  # for type checkers and readers: the name SGLang looks up
    RespHiCacheStorage = RespHiCacheStorageImpl
