"""Typing helpers shared by the package (import under TYPE_CHECKING only)."""

import os
import sys
from collections.abc import Mapping
from typing import Any, TypedDict

from lmcache_resp.settings import EvictionSettings, Secret

if sys.version_info >= (3, 12):
    from collections.abc import Buffer
else:
    from typing_extensions import Buffer

__all__ = ["AdapterParams", "Buffer", "SettingsKwargs", "ValkeyAdapterKwargs"]


class SettingsKwargs(TypedDict, total=False):
    """Every setting by keyword (see :class:`~lmcache_resp.settings.RespSettings`); None
    means "not set". One key per row of the settings' table (rust/src/settings/table.rs), typed
    as the row's ``accepts``: py-tests/test_stubs.py checks it."""

    host: str | None
    port: int | str | None
    unix_path: str | None
    username: str | None
    password: str | Secret | None
    db: int | None
    timeout: float | None
    connect_timeout: float | None
    num_workers: int | None
    connections_per_worker: int | None
    max_inflight_bytes: int | None
    max_inflight_requests: int | None
    cpu_affinity: str | None
    max_capacity_gb: float | None
    eviction: Mapping[str, Any] | EvictionSettings | None
    prefault: bool | None
    require_server_at_start: bool | None
    cluster: bool | None
    get_piece_bytes: int | str | None
    key_prefix: str | None
    ttl_seconds: int | None
    read_from: str | None
    io_backend: str | None
    ssl: bool | None
    ssl_ca_certs: str | os.PathLike[str] | None
    ssl_ca_path: str | os.PathLike[str] | None
    ssl_certfile: str | os.PathLike[str] | None
    ssl_keyfile: str | os.PathLike[str] | None
    ssl_check_hostname: bool | None
    ssl_cert_reqs: str | int | None
    ssl_server_name: str | None
    sentinel_nodes: str | None
    sentinel_service_name: str | None
    sentinel_username: str | None
    sentinel_password: str | Secret | None
    sentinel_tls: bool | None


class ValkeyAdapterKwargs(TypedDict, total=False):
    """LMCache's ``valkey`` adapter's names for settings of ours (``_native.Settings.valkey_fields``),
    accepted so that its config moves over unchanged."""

    startup_nodes: str | None
    cluster_mode: bool | None
    tls_enable: bool | None
    database_id: int | None
    request_timeout: float | None
    connection_timeout: float | None


class AdapterParams(SettingsKwargs, ValkeyAdapterKwargs, total=False):
    """What LMCache may hand a connector: the settings (ours, or the ``valkey`` adapter's names
    for them), a URL, its non-MP name for ``num_workers``, or a bridge's socket (then nothing
    else but ``timeout``)."""

    url: str | None
    resp_num_threads: int | None
    bridge: str | None
