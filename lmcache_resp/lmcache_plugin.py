"""The module path LMCache configs named for the non-MP plugin before it moved to
:mod:`lmcache_resp.lmcache.non_mp`: ``remote_storage_plugin.<name>.module_path:
lmcache_resp.lmcache_plugin`` with ``class_name: RespRemoteConnector`` keeps working, and
loads the same class. New configs name ``lmcache_resp.lmcache.non_mp``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lmcache_resp.lmcache.non_mp import PLUGIN_CLASS, remote_connector_class

__all__ = ["RespRemoteConnector"]


def __getattr__(name: str) -> Any:
    # PEP 562: LMCache's loader does getattr(module, "RespRemoteConnector").
    if name == PLUGIN_CLASS:
        return remote_connector_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    from lmcache_resp.lmcache.non_mp import RespRemoteConnector
