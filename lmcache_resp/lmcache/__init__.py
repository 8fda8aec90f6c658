"""The LMCache adapters, one module per LMCache mode (LMCache 0.5.6 and 0.5.7; docs/lmcache.md):

- :mod:`lmcache_resp.lmcache.mp`, MP mode (LMCache runs as its own server):
  :class:`~lmcache_resp.lmcache.mp.RespConnector`, the native connector its ``native_plugin``
  L2 adapter builds (``"module_path": "lmcache_resp.lmcache.mp", "class_name":
  "RespConnector"``).
- :mod:`lmcache_resp.lmcache.non_mp`, non-MP mode (LMCache inside the vLLM process):
  ``RespRemoteConnector``, the remote storage plugin it loads
  (``remote_storage_plugin.<name>.module_path: lmcache_resp.lmcache.non_mp``, ``class_name:
  RespRemoteConnector``), which drives a RespConnector through
  :class:`~lmcache_resp.lmcache.non_mp.RespConnectorClient`, the asyncio client with
  LMCache's ``ConnectorClientBase`` semantics.

Their error is :class:`~lmcache_resp.errors.ConnectorError` (a failed batch of the client).
Under both lies the Rust core's ``lmcache_resp._native.Connector``, which is not API.

Importing this package never imports LMCache: ``RespRemoteConnector`` is built, and LMCache imported, when it is first
looked up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lmcache_resp.errors import ConnectorError
from lmcache_resp.lmcache.mp import RespConnector
from lmcache_resp.lmcache.non_mp import PLUGIN_CLASS, RespConnectorClient, remote_connector_class

__all__ = ["ConnectorError", "RespConnector", "RespConnectorClient", "RespRemoteConnector"]


def __getattr__(name: str) -> Any:
    # PEP 562: RespRemoteConnector subclasses LMCache's RemoteConnector, so it exists once
    # LMCache is imported, on first use.
    if name == PLUGIN_CLASS:
        return remote_connector_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    from lmcache_resp.lmcache.non_mp import RespRemoteConnector
