"""``stats()`` of every front: the core's counters, typed.

:class:`Stats` is a ``dict`` (``stats["endpoints"]["127.0.0.1:6379"]["hits"]``, ``json.dumps``,
``dict(stats)``) whose entries are also attributes (``stats.hits``, ``stats.endpoints[name].errors``).
Batch-level figures (``batches``, ``batch_latency``) are the front's; everything else is per
endpoint (the server, each shard, each cluster node), and the attributes of :class:`Stats` of
the same names sum over the endpoints. Every field is described in docs/observability.md.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["EndpointStats", "Histogram", "Stats"]


class Histogram(dict[str, Any]):
    """Latencies in fixed buckets: ``bounds`` (upper bounds in seconds, the last ``inf``),
    ``counts`` per bucket (not cumulative), ``count`` and ``sum`` (seconds)."""

    @property
    def bounds(self) -> list[float]:
        return list(self["bounds"])

    @property
    def counts(self) -> list[int]:
        return list(self["counts"])

    @property
    def count(self) -> int:
        return int(self["count"])

    @property
    def sum(self) -> float:
        return float(self["sum"])

    @staticmethod
    def merged(histograms: list[Histogram], bounds: list[float]) -> Histogram:
        counts = [0] * len(bounds)
        total = 0.0
        for h in histograms:
            counts = [a + b for a, b in zip(counts, h.counts)]
            total += h.sum
        return Histogram(bounds=bounds, counts=counts, count=sum(counts), sum=total)


class EndpointStats(dict[str, Any]):
    """One endpoint's counters."""

    def __init__(self, raw: dict[str, Any]) -> None:
        super().__init__(raw)
        self["key_latency"] = Histogram(raw["key_latency"])

    endpoint = property(lambda self: str(self["endpoint"]))
    keys = property(lambda self: dict(self["keys"]), doc="keys completed, by operation")
    bytes_sent = property(lambda self: int(self["bytes_sent"]), doc="payload bytes of SETs")
    bytes_received = property(lambda self: int(self["bytes_received"]), doc="payload bytes of GET hits")
    hits = property(lambda self: int(self["hits"]))
    misses = property(lambda self: int(self["misses"]))
    errors = property(lambda self: dict(self["errors"]), doc="failed keys by error kind")
    retries = property(lambda self: int(self["retries"]))
    reconnects = property(lambda self: int(self["reconnects"]))
    moved = property(lambda self: int(self["moved"]))
    ask = property(lambda self: int(self["ask"]))
    in_flight = property(lambda self: int(self["in_flight"]))
    down = property(lambda self: bool(self.get("down", False)), doc="known to be down now: its keys fail at once")
    server = property(lambda self: str(self.get("server", "")),
                      doc="what the server said it is (``valkey 9.1.2``); empty until a handshake heard it")
    reads = property(lambda self: str(self.get("reads", "")),
                     doc="how its large values are read: ``whole GETs`` or ``pieces of N MiB`` (get_piece_bytes)")

    @property
    def key_latency(self) -> Histogram:
        latency: Histogram = self["key_latency"]
        return latency


class Stats(dict[str, Any]):
    """A front's counters: ``endpoint``, ``enabled`` (False in a build without metrics),
    ``batches`` by operation, ``batch_latency``, and ``endpoints`` by name."""

    def __init__(self, raw: dict[str, Any]) -> None:
        super().__init__(raw)
        self["batch_latency"] = Histogram(raw["batch_latency"])
        self["endpoints"] = {name: EndpointStats(e) for name, e in raw["endpoints"].items()}

    endpoint = property(lambda self: str(self["endpoint"]))
    enabled = property(lambda self: bool(self["enabled"]))
    batches = property(lambda self: dict(self["batches"]), doc="batches completed, by operation")

    @property
    def batch_latency(self) -> Histogram:
        latency: Histogram = self["batch_latency"]
        return latency

    @property
    def endpoints(self) -> dict[str, EndpointStats]:
        endpoints: dict[str, EndpointStats] = self["endpoints"]
        return endpoints

    def _sum(self, field: str) -> int:
        return sum(int(e[field]) for e in self.endpoints.values())

    def _sum_by(self, field: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for e in self.endpoints.values():
            for name, count in e[field].items():
                out[name] = out.get(name, 0) + int(count)
        return out

    keys = property(lambda self: self._sum_by("keys"), doc="keys completed by operation, all endpoints")
    errors = property(lambda self: self._sum_by("errors"), doc="failed keys by kind, all endpoints")
    bytes_sent = property(lambda self: self._sum("bytes_sent"))
    bytes_received = property(lambda self: self._sum("bytes_received"))
    hits = property(lambda self: self._sum("hits"))
    misses = property(lambda self: self._sum("misses"))
    retries = property(lambda self: self._sum("retries"))
    reconnects = property(lambda self: self._sum("reconnects"))
    moved = property(lambda self: self._sum("moved"))
    ask = property(lambda self: self._sum("ask"))
    in_flight = property(lambda self: self._sum("in_flight"))

    @property
    def key_latency(self) -> Histogram:
        """The key latency of all endpoints together."""
        return Histogram.merged([e.key_latency for e in self.endpoints.values()], self.batch_latency.bounds)

    def to_dict(self) -> dict[str, Any]:
        """A plain, JSON-ready copy."""
        return copy.deepcopy({k: v for k, v in self.items()}) | {
            "batch_latency": dict(self.batch_latency),
            "endpoints": {n: dict(e) | {"key_latency": dict(e.key_latency)} for n, e in self.endpoints.items()},
        }

    def summary(self) -> str:
        """One line: keys, bytes, hits/misses, retries, reconnects, errors."""
        keys = ", ".join(f"{op} {n}" for op, n in self.keys.items() if n)
        errors = ", ".join(f"{kind} {n}" for kind, n in self.errors.items() if n) or "none"
        return (
            f"keys: {keys or 'none'}; bytes sent {self.bytes_sent}, received {self.bytes_received}; "
            f"hits {self.hits}, misses {self.misses}; retries {self.retries}, reconnects {self.reconnects}; "
            f"errors: {errors}"
        )

    def __sub__(self, other: Stats) -> Stats:
        """The counters of what happened between two snapshots (gauges: this one's)."""
        raw = self.to_dict()
        before = other.to_dict()

        def minus(now: Any, then: Any, key: str) -> Any:
            if key in ("endpoint", "enabled", "bounds", "in_flight", "down", "server", "reads"):
                return now
            if isinstance(now, dict):
                return {k: minus(v, then.get(k, _zero(v)) if isinstance(then, dict) else _zero(v), k)
                        for k, v in now.items()}
            if isinstance(now, list):
                return [a - b for a, b in zip(now, then)]
            return now - then

        return Stats(minus(raw, before, ""))


def _zero(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _zero(v) for k, v in value.items()}
    if isinstance(value, list):
        return [0 for _ in value]
    return 0 if not isinstance(value, (str, bool)) else value
