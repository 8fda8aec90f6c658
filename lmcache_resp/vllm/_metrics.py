"""The tier's metrics in vLLM's own exporter: definitions for ``build_metric_definitions`` and
the payload ``get_stats`` returns each step.

vLLM serves Prometheus from its API server, not from the engine core the tier runs in: what a
tier wants exported it declares once (name, type, labels) and reports through
``OffloadingConnectorStats``, which travels to the API server with the step's stats. The tier's
own figures (keys moved per operation and outcome, each job's time) come from its completions;
the engine's (errors by kind, reconnects, which servers are up) are the differences of our
core's counters (``stats()``, docs/observability.md) since the last report. Our own collector
(``lmcache_resp.metrics``) still counts the tier in its process, as it counts every front.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lmcache_resp.stats import Stats

__all__ = ["METRICS", "TierMetrics", "definitions"]

KEYS = "vllm:kv_offload_resp_keys"
JOB_SECONDS = "vllm:kv_offload_resp_job_seconds"
ERRORS = "vllm:kv_offload_resp_errors"
RECONNECTS = "vllm:kv_offload_resp_reconnects"
ENDPOINT_UP = "vllm:kv_offload_resp_endpoint_up"
METRICS = (KEYS, JOB_SECONDS, ERRORS, RECONNECTS, ENDPOINT_UP)

_JOB_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def definitions(api: Any) -> dict[str, Any]:
    """vLLM's metric metadata for each metric the tier reports."""
    return {
        KEYS: api.counter(
            documentation=(
                "Rows the Redis/Valkey tier (lmcache-resp) moved or looked up, by operation "
                "(store, load, lookup) and result (ok, miss, failed)."
            ),
            labelnames=("op", "result"),
        ),
        JOB_SECONDS: api.histogram(
            documentation=(
                "Time from a Redis/Valkey tier job's submission to its completion seen by the "
                "tier, by operation (store, load, lookup: one EXISTS batch), in seconds."
            ),
            labelnames=("op",),
            buckets=_JOB_BUCKETS,
        ),
        ERRORS: api.counter(
            documentation="Keys the Redis/Valkey tier's I/O engine failed, by error kind.",
            labelnames=("kind",),
        ),
        RECONNECTS: api.counter(
            documentation="Connections the Redis/Valkey tier's I/O engine made again after a break.",
        ),
        ENDPOINT_UP: api.gauge(
            documentation="0 while a Redis/Valkey server of the tier is known down (its keys fail at once), else 1.",
            labelnames=("endpoint",),
        ),
    }


class TierMetrics:
    """What happened since the last :meth:`take`."""

    def __init__(self) -> None:
        self._keys: dict[tuple[str, str], int] = {}
        self._seconds: dict[str, list[float]] = {}
        self._errors_seen: dict[str, int] = {}
        self._reconnects_seen = 0
        self._up_seen: dict[str, int] = {}

    def count(self, op: str, ok: int, missed: int = 0, failed: int = 0) -> None:
        for result, n in (("ok", ok), ("miss", missed), ("failed", failed)):
            if n:
                self._keys[op, result] = self._keys.get((op, result), 0) + n

    def observe(self, op: str, seconds: float) -> None:
        self._seconds.setdefault(op, []).append(seconds)

    def take(self, stats_type: type, engine: Stats | None) -> Any:
        """The payload (vLLM's ``OffloadingConnectorStats``) of what happened since the last
        call, or None when nothing did."""
        payload = stats_type()
        for (op, result), n in self._keys.items():
            payload.increase_counter(KEYS, n, (op, result))
        for op, samples in self._seconds.items():
            for seconds in samples:
                payload.observe_histogram(JOB_SECONDS, seconds, (op,))
        self._keys, self._seconds = {}, {}
        if engine is not None:
            self._engine(payload, engine)
        return None if payload.is_empty() else payload

    def _engine(self, payload: Any, engine: Stats) -> None:
        errors: dict[str, int] = {}
        reconnects = 0
        for name, endpoint in engine.endpoints.items():
            for kind, n in _errors(endpoint).items():
                errors[kind] = errors.get(kind, 0) + n
            reconnects += int(endpoint["reconnects"])
            up = 0 if endpoint.get("down") else 1
            if self._up_seen.get(name) != up:  # a gauge keeps its last value: report changes
                payload.set_gauge(ENDPOINT_UP, up, (name,))
                self._up_seen[name] = up
        for kind, n in errors.items():
            grew = n - self._errors_seen.get(kind, 0)
            if grew > 0:
                payload.increase_counter(ERRORS, grew, (kind,))
        if reconnects > self._reconnects_seen:
            payload.increase_counter(RECONNECTS, reconnects - self._reconnects_seen)
        self._errors_seen, self._reconnects_seen = errors, reconnects


def _errors(endpoint: Mapping[str, Any]) -> dict[str, int]:
    return {str(kind): int(n) for kind, n in dict(endpoint.get("errors", {})).items()}
