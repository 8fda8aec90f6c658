"""The core's counters as Prometheus metrics (docs/observability.md).

- In any process: when ``prometheus_client`` is importable, the first front made registers one
  collector with its default ``REGISTRY``; at each scrape it reads ``stats()`` of every live
  front of this process (held by weak references) and sums them by endpoint. Whatever serves
  that registry (LMCache's own exporter, ``prometheus_client.start_http_server``) serves them.
  Fronts attached to a bridge are left out: their counters are the bridge's, which it serves
  itself (``--metrics``).
- :func:`exposition` renders the same metrics as Prometheus text without ``prometheus_client``;
  :func:`serve` serves that over HTTP (the bridge's ``--metrics [ADDR:]PORT``), with the
  bounds of lmcache_resp/_metrics_http.py.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from lmcache_resp import _metrics_http
from lmcache_resp._metrics_http import MetricsServer, parse_address
from lmcache_resp.stats import Histogram, Stats

__all__ = ["Family", "MetricsServer", "collect", "exposition", "families", "serve", "track"]


class _Front(Protocol):
    def stats(self) -> Stats: ...


Sample = tuple[str, dict[str, str], float]


class Family:
    """One metric: its name (counters without ``_total``), type, help and samples."""

    def __init__(self, name: str, kind: str, doc: str) -> None:
        self.name, self.kind, self.doc = name, kind, doc
        self.samples: list[Sample] = []

    def add(self, labels: dict[str, str], value: float, suffix: str = "") -> None:
        if self.kind == "counter" and not suffix:
            suffix = "_total"
        self.samples.append((self.name + suffix, labels, value))

    def add_histogram(self, labels: dict[str, str], h: Histogram) -> None:
        cumulative = 0
        for bound, count in zip(h.bounds, h.counts):
            cumulative += count
            le = "+Inf" if math.isinf(bound) else repr(bound)
            self.add(labels | {"le": le}, cumulative, "_bucket")
        self.add(labels, h.count, "_count")
        self.add(labels, h.sum, "_sum")


_fronts: weakref.WeakSet[Any] = weakref.WeakSet()
_registered = False
_lock = threading.Lock()


def track(front: _Front, *, local: bool = True) -> None:
    """Counts ``front`` in this process's metrics (a weak reference); registers the collector
    with ``prometheus_client`` the first time, when it is importable. Bridged fronts
    (``local=False``) are not tracked: the bridge serves their counters."""
    global _registered
    if local:
        _fronts.add(front)
    with _lock:
        if _registered:
            return
        _registered = True
    try:
        from prometheus_client.core import REGISTRY
    except ImportError:
        return
    REGISTRY.register(_Collector())


def _live_stats() -> list[Stats]:
    out = []
    for front in list(_fronts):
        try:
            out.append(front.stats())
        except Exception:  # closed, failed, forked: it has nothing to report
            continue
    return out


def families(stats: Iterable[Stats]) -> list[Family]:
    """The metrics of these fronts' stats, summed by endpoint."""
    fam = {
        f.name: f
        for f in [
            Family("lmcache_resp_batches", "counter", "Batches completed, by operation"),
            Family("lmcache_resp_batch_latency_seconds", "histogram", "Batch submission to its last key's completion"),
            Family("lmcache_resp_keys", "counter", "Keys completed (hit, miss, stored, failed), by operation"),
            Family("lmcache_resp_bytes_sent", "counter", "Payload bytes of SETs sent"),
            Family("lmcache_resp_bytes_received", "counter", "Payload bytes of GET hits received"),
            Family("lmcache_resp_hits", "counter", "GETs that found a value"),
            Family("lmcache_resp_misses", "counter", "GETs that found none"),
            Family("lmcache_resp_errors", "counter", "Failed keys, by error kind"),
            Family("lmcache_resp_retries", "counter", "Requests sent again after a broken connection or a node failure"),
            Family("lmcache_resp_reconnects", "counter", "Connects that succeeded after a connection's first"),
            Family("lmcache_resp_redirects", "counter", "Cluster redirects an endpoint answered, by kind (moved, ask)"),
            Family("lmcache_resp_in_flight", "gauge", "Keys handed to an endpoint and not completed"),
            Family("lmcache_resp_endpoint_up", "gauge", "0 while the endpoint is known to be down (its keys fail at once), else 1"),
            Family("lmcache_resp_key_latency_seconds", "histogram", "A key's batch submission to its completion"),
        ]
    }
    fronts: dict[str, list[Stats]] = {}
    endpoints: dict[str, list[dict[str, Any]]] = {}
    for s in stats:
        fronts.setdefault(s.endpoint, []).append(s)
        for name, e in s.endpoints.items():
            endpoints.setdefault(name, []).append(e)
    for name, group in fronts.items():
        labels = {"endpoint": name}
        for op in group[0].batches:
            fam["lmcache_resp_batches"].add(labels | {"op": op}, sum(s.batches[op] for s in group))
        bounds = group[0].batch_latency.bounds
        fam["lmcache_resp_batch_latency_seconds"].add_histogram(
            labels, Histogram.merged([s.batch_latency for s in group], bounds)
        )
    for name, es in endpoints.items():
        labels = {"endpoint": name}

        def total(field: str, es: list[dict[str, Any]] = es) -> int:
            return sum(int(e[field]) for e in es)

        for op in es[0]["keys"]:
            fam["lmcache_resp_keys"].add(labels | {"op": op}, sum(e["keys"][op] for e in es))
        for field in ("bytes_sent", "bytes_received", "hits", "misses", "retries", "reconnects"):
            fam[f"lmcache_resp_{field}"].add(labels, total(field))
        for kind in es[0]["errors"]:
            fam["lmcache_resp_errors"].add(labels | {"kind": kind}, sum(e["errors"][kind] for e in es))
        for kind in ("moved", "ask"):
            fam["lmcache_resp_redirects"].add(labels | {"kind": kind}, total(kind))
        fam["lmcache_resp_in_flight"].add(labels, total("in_flight"))
        fam["lmcache_resp_endpoint_up"].add(labels, 0 if any(e.get("down") for e in es) else 1)
        fam["lmcache_resp_key_latency_seconds"].add_histogram(
            labels, Histogram.merged([e["key_latency"] for e in es], list(es[0]["key_latency"]["bounds"]))
        )
    return list(fam.values())


def collect() -> list[Family]:
    """The metrics of every live front of this process."""
    return families(_live_stats())


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def exposition(fams: Iterable[Family]) -> str:
    """Prometheus text format (version 0.0.4)."""
    lines = []
    for f in fams:
        shown = f.name + ("_total" if f.kind == "counter" else "")
        lines.append(f"# HELP {shown} {f.doc}")
        lines.append(f"# TYPE {shown} {f.kind}")
        for name, labels, value in f.samples:
            text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            lines.append(f"{name}{{{text}}} {_number(value)}")
    return "\n".join(lines) + "\n"


class _Collector:
    """prometheus_client's side: reads the fronts' stats at each scrape."""

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import Metric

        for f in collect():
            metric = Metric(f.name, f.doc, f.kind)
            for name, labels, value in f.samples:
                metric.add_sample(name, labels, value)
            yield metric

    def describe(self) -> list[Any]:
        return []


def serve(
    address: str,
    read: Callable[[], list[Family]],
    *,
    timeout: float = _metrics_http.TIMEOUT,
    max_connections: int = _metrics_http.MAX_CONNECTIONS,
    max_head_bytes: int = _metrics_http.MAX_HEAD_BYTES,
) -> MetricsServer:
    """Serves ``exposition(read())`` at ``http://ADDR:PORT/metrics`` (and ``/``) from one
    daemon thread. ``address`` is ``PORT`` (this host only, ``127.0.0.1``), ``HOST:PORT`` or
    ``[IPv6]:PORT``; every interface only when named (``0.0.0.0:PORT``); port 0 picks a free
    port. Each connection has ``timeout`` seconds from its accept to send its request (at
    most ``max_head_bytes`` of request line and headers) and take the reply; at
    ``max_connections`` the oldest is closed for each new one (lmcache_resp/_metrics_http.py)."""
    host, port = parse_address(address)
    return MetricsServer(
        host, port, lambda: exposition(read()).encode(),
        timeout=timeout, max_connections=max_connections, max_head_bytes=max_head_bytes,
    )
