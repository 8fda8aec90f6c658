"""Every setting of a RESP connector or store, in one validated, printable model.

Sources, field by field: explicit values, then the URL, then the ``LMCACHE_RESP_*``
environment variables (host, port, username, password only), then defaults.

Three ways in:

- :meth:`RespSettings.resolve` (and :meth:`RespSettings.from_url`): keyword arguments and a
  ``resp://`` / ``redis://`` / ``unix://`` URL. Settings that a URL's authority cannot carry
  may ride in its query: ``resp://h:6379?num_workers=16&max_capacity_gb=40``.
- :meth:`RespSettings.from_lmcache`: LMCache's ``--l2-adapter`` JSON, as a dict or a string:
  the ``native_plugin`` document, the ``"type": "resp"`` flat form, or bare adapter params.
  As in LMCache, an empty ``host``/``username``/``password`` (or ``port`` 0) means "not set",
  so the environment applies.

The password is read (from an argument, the URL or ``$LMCACHE_RESP_PASSWORD``) once, at
construction, into a :class:`~lmcache_resp.config.Secret`; reprs, ``to_dict()`` and error
messages show ``***``. Invalid values raise :class:`~lmcache_resp.errors.InvalidInputError`
naming the field and the accepted range.
"""

from __future__ import annotations

import difflib
import json
import logging
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import parse_qs, urlsplit

from lmcache_resp.config import (
    ConnectionSettings,
    Secret,
    _check_db,
    _check_port,
    _check_timeout,
    redact_url,
    resolve_connection,
)
from lmcache_resp.errors import InvalidInputError

__all__ = [
    "DEFAULT_CONNECTIONS_PER_WORKER",
    "DEFAULT_CPU_AFFINITY",
    "DEFAULT_NUM_WORKERS",
    "EvictionSettings",
    "RespSettings",
]

DEFAULT_NUM_WORKERS = 8
DEFAULT_CONNECTIONS_PER_WORKER = 1
DEFAULT_CPU_AFFINITY = "auto"
MAX_NUM_WORKERS = 1024
MAX_CONNECTIONS_PER_WORKER = 64

# max_capacity_gb is in decimal gigabytes, as LMCache's own adapters count it.
BYTES_PER_GB = 1_000_000_000

logger = logging.getLogger("lmcache_resp")

_EVICTION_POLICIES = {"lru": "LRU", "noop": "noop"}

# What LMCache wraps around the adapter params; never settings of ours.
_ENVELOPE_KEYS = frozenset({"type", "module_path", "class_name", "adapter_params"})
_LMCACHE_TYPES = ("native_plugin", "resp")
_PLUGIN_MODULE = "lmcache_resp"
_PLUGIN_CLASS = "RespConnector"

_EVICTION_FIELD_NAMES = ("eviction_policy", "trigger_watermark", "eviction_ratio")

_CPU_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


# -- value checks: each returns the normalized value or raises naming the field ---------------


def _number(value: Any, name: str, range_text: str) -> float:
    """A finite real number; numeric strings count (LMCache's parsers call float() on them)."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise InvalidInputError(f"{name} must be a number {range_text}, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidInputError(f"{name} must be a number {range_text}, got {value!r}")
    return float(value)


def _int_in_range(value: Any, name: str, low: int, high: int) -> int:
    def refuse() -> InvalidInputError:
        return InvalidInputError(f"{name} must be an integer in {low}..{high}, got {value!r}")

    number = value
    if isinstance(value, str):
        if not value.strip().isdigit():
            raise refuse()
        number = int(value.strip())
    if isinstance(number, float) and number.is_integer():
        number = int(number)
    if isinstance(number, bool) or not isinstance(number, int) or not low <= number <= high:
        raise refuse()
    return number


def _fraction(value: Any, name: str) -> float:
    """A number in (0, 1]."""
    number = _number(value, name, "in (0, 1]")
    if not 0 < number <= 1:
        raise InvalidInputError(f"{name} must be in (0, 1], got {value!r}")
    return number


def _capacity_gb(value: Any) -> float:
    number = _number(value, "max_capacity_gb", ">= 0")
    if number < 0:
        raise InvalidInputError(f"max_capacity_gb must be a number >= 0, got {value!r}")
    return number


def _eviction_policy(value: Any) -> str:
    policy = _EVICTION_POLICIES.get(value.strip().lower()) if isinstance(value, str) else None
    if policy is None:
        accepted = ", ".join(repr(p) for p in _EVICTION_POLICIES.values())
        raise InvalidInputError(f"eviction.eviction_policy must be one of {accepted}, got {value!r}")
    return policy


def _cpu_affinity(value: Any) -> str:
    """A light syntax check; the native layer checks the CPUs and nodes exist."""
    if not isinstance(value, str):
        raise InvalidInputError(f"cpu_affinity must be a str, not {type(value).__name__}")
    text = value.strip().lower()
    if text in ("auto", "none") or _CPU_LIST.match(text.replace(" ", "")):
        return text.replace(" ", "")
    if text.startswith("numa:") and text[5:].isdigit():
        return text
    raise InvalidInputError(
        f"cpu_affinity must be 'auto', 'none', 'numa:N' or a CPU list like '0-3,8', got {value!r}"
    )


def _reject_unknown(given: Mapping[str, Any], accepted: frozenset[str], where: str) -> None:
    unknown = set(given) - accepted
    if unknown:
        raise _unknown_keys_error(unknown, accepted, where)


def _text_to_float(value: Any) -> Any:
    """Numeric text as a float (URL query values, JSON strings); anything else unchanged, for
    the field's own check to judge."""
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return value
    return value


def _unknown_keys_error(unknown: set[str], accepted: frozenset[str], where: str) -> InvalidInputError:
    """Names the unknown keys (never their values: one could be a password) with suggestions."""
    # A misspelt or misplaced eviction field is suggested under its block's name.
    suggestions = {name: name for name in accepted}
    if "eviction" in accepted:
        suggestions.update({name: f"eviction.{name}" for name in _EVICTION_FIELD_NAMES})
    parts = []
    for key in sorted(unknown):
        close = difflib.get_close_matches(key, sorted(suggestions), n=1)
        parts.append(f"{key!r} (did you mean {suggestions[close[0]]!r}?)" if close else repr(key))
    return InvalidInputError(f"unknown {where}: {', '.join(parts)}; accepted: {', '.join(sorted(accepted))}")


# -- the model ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvictionSettings:
    """Client-side eviction once ``max_capacity_gb`` is set: when tracked usage passes
    ``trigger_watermark`` of the capacity, delete ``eviction_ratio`` of it (policy order)."""

    eviction_policy: str = "LRU"
    trigger_watermark: float = 0.8
    eviction_ratio: float = 0.2

    FIELDS = frozenset(_EVICTION_FIELD_NAMES)

    def __post_init__(self) -> None:
        object.__setattr__(self, "eviction_policy", _eviction_policy(self.eviction_policy))
        object.__setattr__(self, "trigger_watermark", _fraction(self.trigger_watermark, "eviction.trigger_watermark"))
        object.__setattr__(self, "eviction_ratio", _fraction(self.eviction_ratio, "eviction.eviction_ratio"))

    @classmethod
    def from_mapping(cls, block: Mapping[str, Any]) -> EvictionSettings:
        """LMCache's ``"eviction": {...}`` block; omitted (or null) fields take defaults."""
        return cls(**_eviction_fields(block))

    def to_dict(self) -> dict[str, Any]:
        return {"eviction_policy": self.eviction_policy, "trigger_watermark": self.trigger_watermark,
                "eviction_ratio": self.eviction_ratio}


def _eviction_fields(block: Any) -> dict[str, Any]:
    """The fields an eviction block sets (None and absent mean "not set")."""
    if isinstance(block, EvictionSettings):
        return block.to_dict()
    if not isinstance(block, Mapping):
        raise InvalidInputError(f"eviction must be an object like {{\"eviction_policy\": \"LRU\"}}, not {type(block).__name__}")
    _reject_unknown({str(k): v for k, v in block.items()}, EvictionSettings.FIELDS, "eviction setting(s)")
    return {k: v for k, v in block.items() if v is not None}


@dataclass(frozen=True)
class RespSettings:
    """Everything a :class:`~lmcache_resp.RespConnector` or
    :class:`~lmcache_resp.PagedRespStore` is built from. Safe to print and log."""

    host: str | None = "localhost"
    port: int = 6379
    unix_path: str | None = None
    username: str | None = None
    password: Secret | None = None
    db: int = 0
    timeout: float = 10.0
    num_workers: int = DEFAULT_NUM_WORKERS
    connections_per_worker: int = DEFAULT_CONNECTIONS_PER_WORKER
    cpu_affinity: str = DEFAULT_CPU_AFFINITY
    max_capacity_gb: float = 0.0
    eviction: EvictionSettings = field(default_factory=EvictionSettings)

    def __post_init__(self) -> None:
        # resolve() has checked these already; a RespSettings built directly gets the same checks.
        if self.password is not None and not isinstance(self.password, Secret):
            raise InvalidInputError("password must be a Secret here: build RespSettings with resolve()")
        object.__setattr__(self, "port", _check_port(self.port, "port"))
        object.__setattr__(self, "db", _check_db(self.db))
        object.__setattr__(self, "timeout", _check_timeout(self.timeout))
        object.__setattr__(self, "num_workers", _int_in_range(self.num_workers, "num_workers", 1, MAX_NUM_WORKERS))
        object.__setattr__(
            self, "connections_per_worker",
            _int_in_range(self.connections_per_worker, "connections_per_worker", 1, MAX_CONNECTIONS_PER_WORKER),
        )
        object.__setattr__(self, "cpu_affinity", _cpu_affinity(self.cpu_affinity))
        object.__setattr__(self, "max_capacity_gb", _capacity_gb(self.max_capacity_gb))
        if not isinstance(self.eviction, EvictionSettings):
            object.__setattr__(self, "eviction", EvictionSettings(**_eviction_fields(self.eviction)))

    # -- constructors ------------------------------------------------------------------------

    @classmethod
    def resolve(cls, url: str | None = None, *, env: Mapping[str, str] | None = None, **explicit: Any) -> RespSettings:
        """Explicit keyword values > ``url`` > environment > defaults, field by field.

        ``None`` means "not set"; so does an empty ``host``. An empty ``username`` or
        ``password`` means "none" (the environment is not consulted); LMCache's convention,
        where empty means "not set", is :meth:`from_lmcache`'s.
        """
        _reject_unknown(explicit, _FIELD_NAMES, "setting(s)")
        given = {k: v for k, v in explicit.items() if v is not None and not (k == "host" and v == "")}
        from_url = _url_query(url)
        connection = resolve_connection(
            given.get("host"), given.get("port"), url=url, unix_path=given.get("unix_path"),
            username=given.get("username"), password=given.get("password"), db=given.get("db"),
            timeout=_text_to_float(given.get("timeout", from_url.pop("timeout", None))),
            env=os.environ if env is None else env,
        )
        eviction = {**from_url.pop("eviction", {}), **_eviction_fields(given.get("eviction", {}))}
        tuning = {**from_url, **{k: given[k] for k in _TUNING_FIELDS if k in given}}
        settings = cls(
            host=connection.host, port=connection.port, unix_path=connection.unix_path,
            username=connection.username, password=connection.password, db=connection.db,
            timeout=connection.timeout, eviction=EvictionSettings(**eviction), **tuning,
        )
        if eviction and settings.capacity_bytes == 0:
            logger.warning("eviction settings have no effect without max_capacity_gb > 0 (capacity tracking is off)")
        return settings

    @classmethod
    def from_url(cls, url: str, *, env: Mapping[str, str] | None = None, **explicit: Any) -> RespSettings:
        """``resolve(url, **explicit)``: the URL, with explicit values winning."""
        return cls.resolve(url, env=env, **explicit)

    @classmethod
    def from_lmcache(cls, config: Mapping[str, Any] | str, *, env: Mapping[str, str] | None = None) -> RespSettings:
        """LMCache's L2 adapter configuration, as a dict or a JSON string: the whole
        ``{"type": "native_plugin", "module_path": "lmcache_resp", "class_name":
        "RespConnector", "adapter_params": {...}}`` document, the ``{"type": "resp", ...}``
        flat form, or just the adapter params."""
        return cls.from_adapter_params(_adapter_params(config), env=env)

    @classmethod
    def from_adapter_params(cls, params: Mapping[str, Any], *, env: Mapping[str, str] | None = None) -> RespSettings:
        """What LMCache hands ``RespConnector(**adapter_params)``, with LMCache's conventions:
        empty strings (and port 0) mean "not set", ``resp_num_threads`` (its non-MP
        ``extra_config`` name) means ``num_workers``."""
        given = {str(k): v for k, v in params.items()}
        _reject_unknown(given, _FIELD_NAMES | {"url", "resp_num_threads"}, "setting(s)")
        if "resp_num_threads" in given:
            if given.get("num_workers") is not None:
                raise InvalidInputError("give num_workers or resp_num_threads, not both")
            given["num_workers"] = given.pop("resp_num_threads")
        blank = {k for k, v in given.items() if v == "" or (k == "port" and v == 0 and not isinstance(v, bool))}
        url = given.pop("url", None) or None
        return cls.resolve(url, env=env, **{k: v for k, v in given.items() if k not in blank})

    # -- views -------------------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return self.connection.endpoint

    @property
    def connection(self) -> ConnectionSettings:
        """The connection part alone (what :class:`~lmcache_resp.RedisClient` takes)."""
        return ConnectionSettings(
            host=self.host, port=self.port, unix_path=self.unix_path, username=self.username,
            password=self.password, db=self.db, timeout=self.timeout,
        )

    @property
    def capacity_bytes(self) -> int:
        """``max_capacity_gb`` in bytes (decimal GB); 0 = no capacity tracking."""
        return int(self.max_capacity_gb * BYTES_PER_GB)

    def to_dict(self) -> dict[str, Any]:
        """For logs and reports: every setting, the password as ``***``."""
        shown = {f.name: getattr(self, f.name) for f in fields(self)}
        shown["password"] = None if self.password is None else "***"
        shown["eviction"] = self.eviction.to_dict()
        return shown

    def native_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``_native.Connector`` / ``_native.PagedStore`` (the one place
        the password is revealed). Capacity settings are included only when tracking is on."""
        kwargs: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            **self.connection.native_kwargs(),
            "num_workers": self.num_workers,
            "connections_per_worker": self.connections_per_worker,
            "cpu_affinity": self.cpu_affinity,
        }
        if self.capacity_bytes > 0:
            kwargs.update(
                capacity_bytes=self.capacity_bytes,
                eviction_policy=self.eviction.eviction_policy.lower(),
                trigger_watermark=self.eviction.trigger_watermark,
                eviction_ratio=self.eviction.eviction_ratio,
            )
        return kwargs


_CONNECTION_FIELDS = frozenset({"host", "port", "unix_path", "username", "password", "db", "timeout"})
_TUNING_FIELDS = frozenset({"num_workers", "connections_per_worker", "cpu_affinity", "max_capacity_gb"})
_FIELD_NAMES = _CONNECTION_FIELDS | _TUNING_FIELDS | {"eviction"}
# What a URL query may set beyond parse_url's ``db``: the settings its authority cannot carry.
_QUERY_FIELDS = frozenset({"timeout"}) | _TUNING_FIELDS | EvictionSettings.FIELDS


def _url_query(url: str | None) -> dict[str, Any]:
    """Settings from a URL's query (``?num_workers=16&trigger_watermark=0.9``), eviction
    fields gathered under ``"eviction"``. Values stay text; the model checks them."""
    if url is None:
        return {}
    query = parse_qs(urlsplit(url).query, keep_blank_values=True) if isinstance(url, str) else {}
    _reject_unknown(query, _QUERY_FIELDS | {"db"}, f"parameter(s) in URL {redact_url(url)!r}")
    found: dict[str, Any] = {k: v[-1] for k, v in query.items() if k in _QUERY_FIELDS}
    eviction = {k: found.pop(k) for k in EvictionSettings.FIELDS if k in found}
    if eviction:
        found["eviction"] = eviction
    return found


def _adapter_params(config: Mapping[str, Any] | str) -> Mapping[str, Any]:
    """The adapter params inside any of LMCache's three shapes."""
    document = _parse_json(config) if isinstance(config, str) else config
    if not isinstance(document, Mapping):
        raise InvalidInputError(f"LMCache L2 adapter config must be a JSON object, not {type(document).__name__}")
    kind = document.get("type")
    if kind is None:
        return document
    if kind not in _LMCACHE_TYPES:
        raise InvalidInputError(f"L2 adapter type must be one of {', '.join(map(repr, _LMCACHE_TYPES))}, got {kind!r}")
    if kind == "resp":
        return {k: v for k, v in document.items() if k != "type"}
    _check_plugin_target(document)
    _reject_unknown(
        {str(k): v for k, v in document.items()}, _ENVELOPE_KEYS,
        "key(s) beside adapter_params (RespConnector sees only adapter_params: put settings there)",
    )
    params = document.get("adapter_params", {})
    if not isinstance(params, Mapping):
        raise InvalidInputError(f"adapter_params must be a JSON object, not {type(params).__name__}")
    return params


def _check_plugin_target(document: Mapping[str, Any]) -> None:
    module, cls = document.get("module_path"), document.get("class_name")
    if module not in (None, _PLUGIN_MODULE) or cls not in (None, _PLUGIN_CLASS):
        raise InvalidInputError(
            f"this native_plugin config selects {module}.{cls}, not {_PLUGIN_MODULE}.{_PLUGIN_CLASS}"
        )


def _parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        # exc.msg and the position only: the text itself may hold a password.
        raise InvalidInputError(f"invalid L2 adapter JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
