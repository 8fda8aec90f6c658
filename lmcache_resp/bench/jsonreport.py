"""The --json document: every round's samples, medians, units; never the password."""

from __future__ import annotations

import platform
from dataclasses import asdict
from typing import Any

from lmcache_resp import __version__
from lmcache_resp.bench.errors import Mismatch
from lmcache_resp.bench.options import Options
from lmcache_resp.bench.results import RunResult
from lmcache_resp.bench.rounds import ClientResult
from lmcache_resp.bench.sweep import KNEE_SHARE, SweepPoint
from lmcache_resp.bench.units import UNITS_NOTE

__all__ = ["SCHEMA", "config_json", "failure_json", "result_json"]

SCHEMA = "lmcache-resp-bench/1"
UNITS = {
    "set": "GB/s", "get": "GB/s", "exists": "ops/s", "delete": "ops/s",
    "GB": "1e9 bytes of payload", "latency": "milliseconds", "cpu_per_gb": "CPU seconds (user+sys) per GB of payload",
    "note": UNITS_NOTE,
}


def config_json(options: Options) -> dict[str, Any]:
    return {
        "chunk_bytes": options.chunk_bytes,
        "num_keys": options.num_keys,
        "num_workers": options.num_workers,
        "rounds": options.rounds,
        "ops": list(options.ops),
        "timeout_s": options.timeout,
        "cpu_affinity": options.cpu_affinity,
        "compare": list(options.compare),
        "sweep": options.sweep,
        "seed": options.seed,
    }


def _client_json(client: ClientResult) -> dict[str, Any]:
    return {
        "name": client.name,
        "description": client.description,
        "failure": client.failure,
        "ops": {
            op: {
                "median": client.median(op),
                "unit": UNITS[op],
                "samples": [s.rate for s in samples],
                "seconds": [s.seconds for s in samples],
                "cpu_seconds": [s.cpu_seconds for s in samples],
                "cpu_per_gb": client.cpu_per_gb(op),
            }
            for op, samples in client.samples.items()
        },
    }


def _point_json(p: SweepPoint) -> dict[str, Any]:
    return {
        "chunk_bytes": p.chunk_bytes, "num_workers": p.num_workers, "keys": p.keys, "capped": p.capped,
        "set_gb_per_s": p.set_gbps, "get_gb_per_s": p.get_gbps,
        "set_samples": [s.rate for s in p.result.samples.get("set", [])],
        "get_samples": [s.rate for s in p.result.samples.get("get", [])],
    }


def _base(options: Options) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "lmcache_resp": __version__,
        "python": platform.python_version(),
        "units": UNITS,
        "config": config_json(options),
    }


def result_json(result: RunResult) -> dict[str, Any]:
    doc = _base(result.options)
    ours = result.ours
    doc.update(
        server=result.target.describe(),
        key_prefix=result.key_prefix,
        verified=True,
        verified_get_batches=result.verified_get_batches,
        verified_bytes=result.verified_bytes,
        results={op: ours.median(op) for op in result.options.ops} if ours and not result.sweep else {},
        clients=[_client_json(c) for c in result.clients],
        unavailable=result.unavailable,
        latency_ms={op: asdict(s) for op, s in result.latency.items()} if result.latency else None,
        ceiling=[asdict(p) for p in result.ceiling] if result.ceiling else None,
        sweep=None,
    )
    if result.sweep is not None:
        s = result.sweep
        doc["sweep"] = {
            "knee_share": KNEE_SHARE,
            "by_chunk": [_point_json(p) for p in s.by_chunk],
            "by_workers": [_point_json(p) for p in s.by_workers],
            "chunk_knee_bytes": s.chunk_knee.chunk_bytes if s.chunk_knee else None,
            "workers_knee": s.workers_knee.num_workers if s.workers_knee else None,
        }
    return doc


def failure_json(options: Options, error: str, mismatches: list[Mismatch] | None = None) -> dict[str, Any]:
    doc = _base(options)
    doc.update(
        verified=False,
        error=error,
        mismatches=[asdict(m) for m in mismatches or []],
    )
    return doc
