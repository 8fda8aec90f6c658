"""Every setting of a client, store or connector: one typed, validated, printable object.

:class:`RespSettings` is the native ``Settings`` (checked once, in Rust, where the defaults
live) with the ways in that need Python:

- :meth:`RespSettings.resolve` (and :meth:`~RespSettings.from_url`): keyword arguments and a
  ``resp://`` / ``redis://`` / ``rediss://`` / ``unix://`` URL, over the ``LMCACHE_RESP_*``
  environment. Settings that a URL's authority cannot carry ride in its query:
  ``resp://h:6379?num_workers=16&max_capacity_gb=40``. Precedence, field by field: explicit
  values, then the URL, then the environment (host, port, username, password; with TLS on,
  the CA bundle and the client certificate and key), then defaults.
- TLS, with redis-py's names: ``rediss://`` or ``ssl=True`` turns it on; ``ssl_ca_certs``
  (a CA bundle; default the system trust store), ``ssl_ca_path`` (a directory of CAs),
  ``ssl_certfile`` and ``ssl_keyfile`` (mutual TLS), ``ssl_check_hostname`` (default True),
  ``ssl_server_name`` (the name for SNI and verification instead of the host) and
  ``ssl_cert_reqs`` (``"required"``, the default, or ``"none"``: no verification, for test
  rigs only, logged at WARNING). The files are read when the settings are built. ``ssl=False``
  with a ``rediss://`` URL, or an ``ssl_*`` setting while TLS is off, is an error: nothing
  is ever silently sent in plaintext. ``LMCACHE_RESP_SSL_CA_CERTS``, ``_CERTFILE`` and
  ``_KEYFILE`` apply only where TLS is on.
- Sentinel: ``redis+sentinel://[user:pass@]s1:26379[,s2:26379...]/service_name`` (redis-py's
  form; ``rediss+sentinel://`` for TLS to the data server), or ``sentinel_nodes``
  (``"s1:26379,s2:26379"``) with ``sentinel_service_name``. The URL's credentials and
  ``username``/``password`` are the data server's; ``sentinel_username``/``sentinel_password``
  are the Sentinels' own (never read from a URL). ``sentinel_tls`` (default: as the data
  server) speaks TLS to the Sentinels with the same ``ssl_*`` settings. The store finds the
  primary through the Sentinels and follows failovers (docs/reliability.md, "Sentinel").
- :meth:`RespSettings.from_lmcache`: LMCache's ``--l2-adapter`` JSON (0.5.6 and 0.5.7), as a
  dict or a string: the ``native_plugin`` document, the ``"type": "resp"`` or ``"type":
  "valkey"`` flat form, or bare adapter params. As in LMCache, an empty
  ``host``/``username``/``password`` (or ``port`` 0) means "not set", so the environment
  applies. LMCache's conventions are decided in the core (``rust/src/settings/lmcache.rs``);
  this module parses the JSON and hands it over.
- :meth:`RespSettings.from_sglang`: SGLang's ``--hicache-storage-backend-extra-config`` JSON
  (as a dict or a string), our settings beside SGLang's own keys, read like LMCache's adapter
  params (empty means "not set", unknown keys are errors).
- :meth:`RespSettings.from_vllm`: an entry of vLLM's ``secondary_tiers`` (in
  ``--kv-transfer-config``'s ``kv_connector_extra_config``), our settings beside vLLM's own keys
  (``type``, ``module_path``, ``backpressure``, ``locality``), read like SGLang's.
- A namespace and an expiry, as LMCache's ``valkey`` adapter has them: ``key_prefix`` (every
  key goes on the wire as ``<key_prefix>@<key>``; no ``@`` in it) and ``ttl_seconds`` (every
  SET is ``SET key value PX ms``; not with ``max_capacity_gb`` > 0). That adapter's other
  names are accepted too (``startup_nodes``, ``cluster_mode``, ``tls_enable``,
  ``database_id``, ``request_timeout``, ``connection_timeout``: ``Settings.valkey_fields``),
  each meaning one of ours; given with ours and disagreeing, they are refused.

The password is read once, at construction, into a :class:`Secret`; reprs, ``to_dict()`` and
error messages show ``***``, and TLS shows as its file paths, never a key. Invalid values raise
:class:`~lmcache_resp.errors.InvalidInputError` naming the field and the accepted range.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any

from lmcache_resp import _native
from lmcache_resp.errors import InvalidInputError

__all__ = [
    "ENV_PASSWORD",
    "ENV_SSL_CA_CERTS",
    "ENV_SSL_CERTFILE",
    "ENV_SSL_KEYFILE",
    "ENV_USERNAME",
    "EvictionSettings",
    "RespSettings",
    "Secret",
]

Secret = _native.Secret
EvictionSettings = _native.EvictionSettings

# The variables, as the settings' table names them (rust/src/settings/table.rs).
_ENV_VARS = dict(_native.Settings.env_vars)
ENV_USERNAME = _ENV_VARS["username"]
ENV_PASSWORD = _ENV_VARS["password"]
# Read only where TLS is on (rediss:// or ssl=True): deployment-wide, harmless for plaintext.
ENV_SSL_CA_CERTS = _ENV_VARS["ssl_ca_certs"]
ENV_SSL_CERTFILE = _ENV_VARS["ssl_certfile"]
ENV_SSL_KEYFILE = _ENV_VARS["ssl_keyfile"]

logger = logging.getLogger("lmcache_resp")

# SGLang's own keys in --hicache-storage-backend-extra-config, every one SGLang 0.5.23 reads
# whatever the backend: its dynamic loader's (backend_name, module_path, class_name) and cache
# controller's (interface_v1; the prefetch tuning and hicache_storage_pass_prefix_keys, taken
# out by parse_storage_backend_extra_config but not on the decode offload path, which json.loads
# the flag as it is; tp_lcm_size), the host pool's allocator ("allocator": "shm", read by
# pool_host/common.py's get_allocator_type and left in the dict), and file_storage_path, which
# the unified radix cache adds to the dict of any backend when --file-storage-path is set.
_SGLANG_KEYS = frozenset({
    "backend_name", "module_path", "class_name", "interface_v1", "prefetch_threshold", "prefetch_timeout_base",
    "prefetch_timeout_per_ki_token", "hicache_storage_pass_prefix_keys", "tp_lcm_size", "allocator",
    "file_storage_path",
})

# vLLM's keys in an entry of secondary_tiers: SecondaryTierFactory's (which class, its
# backpressure detector) and the tier's locality, which it passes to the tier beside ours.
_VLLM_KEYS = frozenset({"type", "module_path", "backpressure", "locality"})


class RespSettings(_native.Settings):
    """Everything a :class:`~lmcache_resp.RedisClient`, :class:`~lmcache_resp.PagedRespStore`
    or :class:`~lmcache_resp.RespConnector` is built from. Safe to print and log.

    ``RespSettings(url=None, *, env=None, **explicit)`` checks and resolves; ``env`` defaults
    to no environment here, and to ``os.environ`` in :meth:`resolve`.
    """

    __slots__ = ()

    @classmethod
    def resolve(cls, url: str | None = None, *, env: Mapping[str, str] | None = None, **explicit: Any) -> RespSettings:
        """Explicit keyword values > ``url`` > environment > defaults, field by field.

        ``None`` means "not set"; so does an empty ``host``. An empty ``username`` or
        ``password`` means "none" (the environment is not consulted); LMCache's convention,
        where empty means "not set", is :meth:`from_lmcache`'s.
        """
        return cls._logged(cls(url, env=_environment(env), **explicit))

    @classmethod
    def from_url(cls, url: str, *, env: Mapping[str, str] | None = None, **explicit: Any) -> RespSettings:
        """``resolve(url, **explicit)``: the URL, with explicit values winning."""
        return cls.resolve(url, env=env, **explicit)

    @classmethod
    def from_lmcache(cls, config: Mapping[str, Any] | str, *, env: Mapping[str, str] | None = None) -> RespSettings:
        """LMCache's L2 adapter configuration (MP mode), as a dict or a JSON string: the whole
        ``{"type": "native_plugin", "module_path": "lmcache_resp.lmcache.mp", "class_name":
        "RespConnector", "adapter_params": {...}}`` document, the ``{"type": "resp", ...}`` or
        ``{"type": "valkey", ...}`` flat form, or just the adapter params. LMCache's own top-level
        keys (``max_capacity_gb``, ``eviction``, ``shared``, ``persist_enabled``, ``serde``) are
        LMCache's: they configure its accounting and eviction controller, not the connector.
        LMCache 0.5.6's ``affinity_tag`` is accepted too, with a warning: 0.5.7 refuses it.
        LMCache's conventions are the core's (``rust/src/settings/lmcache.rs``)."""
        document = _parse_json(config, "L2 adapter") if isinstance(config, str) else config
        return cls._logged(cls(_native.Settings.from_lmcache_document(document, env=_environment(env))))

    @classmethod
    def from_sglang(cls, config: Mapping[str, Any] | str, *, env: Mapping[str, str] | None = None) -> RespSettings:
        """SGLang's ``--hicache-storage-backend-extra-config`` (a dict or its JSON): SGLang's own
        keys (``backend_name``, ``module_path``, ``class_name``, ``interface_v1``, the prefetch
        tuning, ``allocator``, ...: every key SGLang itself reads) are SGLang's; the rest are ours, read as :meth:`from_adapter_params` reads
        LMCache's, except that capacity and eviction (``max_capacity_gb``, ``eviction``) are
        ours here: SGLang does not account for what its L3 storage holds."""
        document = _parse_json(config, "SGLang extra config") if isinstance(config, str) else config
        if not isinstance(document, Mapping):
            raise InvalidInputError(f"SGLang's extra config must be a JSON object, not {type(document).__name__}")
        params = {k: v for k, v in document.items() if k not in _SGLANG_KEYS}
        return cls.from_adapter_params(params, env=env, lmcache_evicts=False)

    @classmethod
    def from_vllm(cls, config: Mapping[str, Any] | str, *, env: Mapping[str, str] | None = None) -> RespSettings:
        """An entry of vLLM's ``secondary_tiers`` (a dict or its JSON), or what vLLM's
        ``SecondaryTierFactory`` passes the tier of it: vLLM's keys (``type``,
        ``module_path``, ``backpressure``, ``locality``) are vLLM's; the rest are ours, read as
        :meth:`from_sglang` reads SGLang's (empty means "not set", unknown keys are errors,
        capacity and eviction are ours: vLLM does not account for what a secondary tier holds)."""
        document = _parse_json(config, "vLLM secondary tier") if isinstance(config, str) else config
        if not isinstance(document, Mapping):
            raise InvalidInputError(f"a vLLM secondary tier must be a JSON object, not {type(document).__name__}")
        params = {k: v for k, v in document.items() if k not in _VLLM_KEYS}
        return cls.from_adapter_params(params, env=env, lmcache_evicts=False)

    @classmethod
    def from_adapter_params(
        cls, params: Mapping[str, Any], *, env: Mapping[str, str] | None = None, lmcache_evicts: bool = True
    ) -> RespSettings:
        """What LMCache hands ``RespConnector(**adapter_params)``, with LMCache's conventions:
        empty strings (and port 0) mean "not set", ``resp_num_threads`` (its non-MP
        ``extra_config`` name) means ``num_workers``, ``url`` names the server.

        ``lmcache_evicts`` (MP mode, the default): LMCache owns capacity and eviction (its
        keys at the top level of the adapter JSON), so ``max_capacity_gb``/``eviction`` here
        would make a second evictor and are refused. The non-MP plugin passes False: there the
        connector owns them."""
        native = _native.Settings.from_lmcache_params(params, env=_environment(env), lmcache_evicts=lmcache_evicts)
        return cls._logged(cls(native))

    @classmethod
    def _logged(cls, settings: RespSettings) -> RespSettings:
        """``settings``, its warnings logged."""
        for warning in settings.warnings:
            logger.warning("%s", warning)
        return settings


def _environment(env: Mapping[str, str] | None) -> Mapping[str, str]:
    """``env``, or the process's environment where none is given."""
    return os.environ if env is None else env


def _parse_json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        # exc.msg and the position only: the text itself may hold a password.
        raise InvalidInputError(f"invalid {what} JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
