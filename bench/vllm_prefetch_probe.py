"""Where a warm prefetch's time goes, ours against LMCache's ``resp`` (#43): each adapter behind
the same timing shim (l2_timing.py) in LMCache's MP server, under a real vLLM engine on CPU.

Run in scripts/test-vllm.sh's venv, under the exclusive CPU lock:

    flock -x CPU_LOCK VENV/bin/python bench/vllm_prefetch_probe.py OUT.json [--server valkey9|redis]
        [--adapters ours,resp] [--rounds 2] [--reps 5] [--length 4096] [--ours-shape 8x1]

An adapter is ``ours``, ``resp`` or ``ours@WxC`` (ours with W workers of C connections each, beside
the default shape in the same run: ``--adapters ours,ours@2x4,resp``).

One engine life per adapter and alternation (ABBA): the server flushed, a fresh ``lmcache server``
whose L2 is ``native_plugin`` ``l2_timing.TimedConnector`` over the adapter, a fresh engine, a
64-token warm-up request, a cold prompt of LENGTH + 1 tokens, then REPS warm requests of it
(LMCache's L1 emptied before each). Per warm request it reports:

- TTFT and LMCache's "Prefetch request completed (L1+L2) ... in X ms";
- from the shim's trace: the lookup (EXISTS batch) and the load (GET batch), each from LMCache's
  submit to LMCache's demux thread draining its completion, the submit call itself, and the gap
  LMCache spends between the lookup's drain and the load's submit;
- per-thread CPU time, run-queue wait (``/proc/PID/task/TID/schedstat``: time a runnable thread
  waited for a CPU) and context switches over the request, for the connector's own threads, the
  rest of LMCache's server, the engine's processes and the Redis/Valkey server.

Prints a summary table per adapter (medians over every warm request) and writes every request's
figures to OUT.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lmcache_resp.bench.lmcache_l2 import alternation_order
from lmcache_resp.bench.vllm_model import CHUNK_TOKENS, write_model
from lmcache_resp.bench.vllm_stack import Engine, LMCacheServer, wait_for_keys
from lmcache_resp.bench.vllm_ttft import _prompt
from lmcache_resp_servers.server import RedisServer
from lmcache_resp_servers.wire import command

HERE = Path(__file__).resolve().parent


def _thread_stats(pid: int) -> dict[int, tuple[float, float, int, int]]:
    """Per thread of ``pid``: (cpu ns, run-queue wait ns, voluntary, involuntary switches)."""
    out = {}
    base = Path(f"/proc/{pid}/task")
    try:
        tids = [int(t) for t in os.listdir(base)]
    except OSError:
        return out
    for tid in tids:
        try:
            cpu, wait, _ = (int(x) for x in (base / str(tid) / "schedstat").read_text().split())
            status = (base / str(tid) / "status").read_text().splitlines()
        except (OSError, ValueError):
            continue
        fields = dict(line.split(":", 1) for line in status if ":" in line)
        out[tid] = (cpu, wait, int(fields["voluntary_ctxt_switches"]), int(fields["nonvoluntary_ctxt_switches"]))
    return out


def _session_pids(sid: int) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if int(fields[3]) == sid:  # fields after the name: state ppid pgrp session ...
            pids.append(int(name))
    return pids


def _all_stats(groups: dict[str, list[int]]) -> dict[str, dict[int, tuple[float, float, int, int]]]:
    """Per group of processes (``lmcache``, ``engine``, ``server``): every thread's figures."""
    out: dict[str, dict[int, tuple[float, float, int, int]]] = {}
    for group, pids in groups.items():
        out[group] = {}
        for pid in pids:
            out[group].update(_thread_stats(pid))
    return out


def _delta(before: dict[int, tuple[float, float, int, int]], after: dict[int, tuple[float, float, int, int]],
           tids: set[int] | None = None, exclude: set[int] | None = None) -> dict[str, float]:
    total = [0.0, 0.0, 0, 0]
    for tid, now in after.items():
        if tids is not None and tid not in tids:
            continue
        if exclude and tid in exclude:
            continue
        then = before.get(tid, (0, 0, 0, 0))
        for i in range(4):
            total[i] += now[i] - then[i]
    return {"cpu_ms": total[0] / 1e6, "wait_ms": total[1] / 1e6, "vcsw": total[2], "ivcsw": total[3]}


def _trace(path: Path) -> tuple[set[int], list[dict[str, Any]], dict[int, int], list[dict[str, Any]]]:
    """The connector's threads, the submits, each batch id's drain time, LMCache's own steps."""
    connector: set[int] = set()
    submits, drained, steps = [], {}, []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record["event"] == "threads":
            connector = set(record["connector"])
        elif record["event"] == "submit":
            submits.append(record)
        elif record["event"] == "drain":
            for batch in record["ids"]:
                drained[batch] = record["t0"]
        else:
            steps.append(record)
    return connector, submits, drained, steps


def _life(adapter: str, alternation: int, args: argparse.Namespace, redis: RedisServer, model: Path,
          scratch: Path) -> list[dict[str, Any]]:
    command(redis.port, "FLUSHALL", "SYNC")
    trace = scratch / f"trace-{adapter.replace('@', '-')}-{alternation}.jsonl"
    inner, _, shape = adapter.partition("@")
    params: dict[str, Any] = {"inner": inner, "trace": str(trace), "host": "127.0.0.1", "port": redis.port,
                              "num_workers": 8}
    if inner == "ours":
        params["timeout"] = 2
        shape = shape or args.ours_shape
        if shape:
            workers, connections = (int(x) for x in shape.split("x"))
            params["num_workers"], params["connections_per_worker"] = workers, connections
    spec = {"type": "native_plugin", "module_path": "l2_timing", "class_name": "TimedConnector",
            "adapter_params": params}
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)}
    server = LMCacheServer(spec, scratch, chunk_tokens=CHUNK_TOKENS, env=env)
    rows = []
    try:
        engine = Engine({"model": str(model), "lmcache_port": server.port,
                         "max_model_len": args.length + 2 * CHUNK_TOKENS}, scratch)
        try:
            engine.generate("warmup", _prompt(64, 7 + alternation), 2)
            tokens = _prompt(args.length + 1, 1000 * alternation + args.length)
            engine.generate("cold", tokens, 4)
            wait_for_keys(redis.port, args.length // CHUNK_TOKENS)
            assert redis.process is not None
            engine_pids = _session_pids(engine.process.pid)
            for rep in range(args.reps):
                server.clear_l1()
                time.sleep(0.2)
                name = f"warm{rep}"
                groups = {"lmcache": [server.process.pid], "engine": engine_pids, "server": [redis.process.pid]}
                before, start = _all_stats(groups), time.monotonic_ns()
                result = engine.generate(name, tokens, 4)
                end, after = time.monotonic_ns(), _all_stats(groups)
                lines = [p for p in server.prefetches() if p.request_id.startswith(name + "-")]
                rows.append({"adapter": adapter, "alternation": alternation, "rep": rep, "name": name, "ttft_ms": result["ttft_s"] * 1e3,
                             "prefetch_ms": lines[-1].ms if lines else None, "l2": lines[-1].l2 if lines else 0,
                             "window": (start, end), "before": before, "after": after})
        finally:
            engine.close()
    finally:
        server.stop()
    connector, submits, drained, steps = _trace(trace)
    for row in rows:
        start, end = row.pop("window")
        before, after = row.pop("before"), row.pop("after")
        mine = [s for s in submits if start <= s["t0"] <= end and s["op"] in ("exists", "get")]
        lookups = [s for s in mine if s["op"] == "exists"]
        loads = [s for s in mine if s["op"] == "get"]
        if lookups and loads and lookups[0]["id"] in drained and loads[0]["id"] in drained:
            lookup, load = lookups[0], loads[0]
            row["lookup_ms"] = (drained[lookup["id"]] - lookup["t0"]) / 1e6
            row["lookup_submit_us"] = (lookup["t1"] - lookup["t0"]) / 1e3
            row["hop_ms"] = (load["t0"] - drained[lookup["id"]]) / 1e6
            row["load_ms"] = (drained[load["id"]] - load["t0"]) / 1e6
            row["load_submit_us"] = (load["t1"] - load["t0"]) / 1e3
            row["load_keys"], row["load_bytes"] = load["keys"], load["bytes"]
            submitted = [e["t"] for e in steps if e["event"] == "prefetch_submit" and start <= e["t"] <= end
                         and e["request"].startswith(row["name"] + "-")]
            published = [e["t"] for e in steps if e["event"] == "published" and e["t"] >= drained[load["id"]]]
            if submitted and published:
                answered = [e["t"] for e in steps if e["event"] == "query" and e["done"] and e["t"] >= published[0]]
                row["to_lookup_ms"] = (lookup["t0"] - submitted[0]) / 1e6
                row["to_publish_ms"] = (published[0] - drained[load["id"]]) / 1e6
                if answered:
                    row["to_query_ms"] = (answered[0] - published[0]) / 1e6
                    row["polls"] = sum(1 for e in steps if e["event"] == "query" and submitted[0] <= e["t"] <= answered[0])
                    row["prefetch_traced_ms"] = (answered[0] - submitted[0]) / 1e6
                    row["after_prefetch_ms"] = row["ttft_ms"] - (answered[0] - start) / 1e6
        demux = {r["tid"] for r in map(json.loads, trace.read_text().splitlines()) if r["event"] == "drain"}
        row["connector_threads"] = _delta(before["lmcache"], after["lmcache"], connector)
        row["demux_thread"] = _delta(before["lmcache"], after["lmcache"], demux)
        row["lmcache_other"] = _delta(before["lmcache"], after["lmcache"], exclude=connector | demux)
        row["engine"] = _delta(before["engine"], after["engine"])
        row["redis"] = _delta(before["server"], after["server"])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--server", default="valkey9")
    parser.add_argument("--adapters", default="ours,resp")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--ours-shape", default=None)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="lmcache-resp-prefetch-probe-"))
    redis = RedisServer(scratch / "redis", server=args.server)
    rows: list[dict[str, Any]] = []
    try:
        model = write_model(scratch / "model")
        adapters = args.adapters.split(",")
        for alternation in range(args.rounds):
            for adapter in alternation_order(adapters, alternation):
                started = time.monotonic()
                life = _life(adapter, alternation, args, redis, model, scratch)
                rows += life
                print(f"{adapter}, alternation {alternation + 1}: {time.monotonic() - started:.0f} s; "
                      + ", ".join(f"{r['ttft_ms']:.0f} ms ({r['prefetch_ms']} ms: to lookup {r.get('to_lookup_ms', 0):.1f}, lookup "
                                  f"{r.get('lookup_ms', 0):.1f}, hop {r.get('hop_ms', 0):.1f}, load {r.get('load_ms', 0):.1f}, "
                                  f"to publish {r.get('to_publish_ms', 0):.1f}, to query {r.get('to_query_ms', 0):.1f})"
                                  for r in life),
                      flush=True)
    finally:
        redis.stop()
    Path(args.out).write_text(json.dumps({"server": args.server, "length": args.length, "ours_shape": args.ours_shape,
                                          "rows": rows}, indent=1))
    _summary(rows)
    return 0


def _median(rows: list[dict[str, Any]], *path: str) -> float:
    values = []
    for row in rows:
        value: Any = row
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None:
            values.append(float(value))
    return statistics.median(values) if values else float("nan")


def _summary(rows: list[dict[str, Any]]) -> None:
    adapters = list(dict.fromkeys(r["adapter"] for r in rows))
    print("medians over every warm request:")
    columns = [("TTFT ms", ("ttft_ms",)), ("prefetch ms", ("prefetch_ms",)), ("traced prefetch", ("prefetch_traced_ms",)),
               ("to lookup ms", ("to_lookup_ms",)), ("lookup ms", ("lookup_ms",)),
               ("hop ms", ("hop_ms",)), ("load ms", ("load_ms",)), ("to publish ms", ("to_publish_ms",)),
               ("to query ms", ("to_query_ms",)), ("polls", ("polls",)), ("after prefetch", ("after_prefetch_ms",)),
               ("lookup submit us", ("lookup_submit_us",)), ("load submit us", ("load_submit_us",)),
               ("conn cpu ms", ("connector_threads", "cpu_ms")), ("conn wait ms", ("connector_threads", "wait_ms")),
               ("conn vcsw", ("connector_threads", "vcsw")), ("demux wait ms", ("demux_thread", "wait_ms")),
               ("lmc other cpu", ("lmcache_other", "cpu_ms")), ("lmc other wait", ("lmcache_other", "wait_ms")),
               ("engine cpu ms", ("engine", "cpu_ms")), ("engine wait", ("engine", "wait_ms")),
               ("server cpu ms", ("redis", "cpu_ms"))]
    for label, path in columns:
        print(f"  {label:16}" + "".join(f" {a}: {_median([r for r in rows if r['adapter'] == a], *path):9.2f}"
                                         for a in adapters))


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
