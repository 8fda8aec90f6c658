"""``--sentinel-failover``: how long keys fail while Redis Sentinel fails a primary over,
lmcache_resp's store side by side with redis-py's Sentinel client, in one run.

A throwaway group is started (a primary, 2 replicas, 3 Sentinels; short down-after and
failover timeouts: ``servers.sentinel.SentinelGroup``). Each client SETs batches of
:data:`BATCH_KEYS` keys of :data:`VALUE_BYTES` bytes in a loop, in a thread of its own: ours
a ``PagedRespStore`` over the ``redis+sentinel://`` URL, redis-py a pipeline on
``Sentinel.master_for``. After a second the fault comes (``--sentinel-fault``: ``kill``, the
primary SIGKILLed; ``failover``, ``SENTINEL FAILOVER``), then both go on until each has been
writing for a while on the new primary. Reported per client: keys and batches that failed,
how long keys failed (the first failed batch's start to the last one's end), how long after
the fault writes were back (the end of the first fully successful batch after the last
failure), and the acknowledged keys missing from the new primary afterwards (asynchronous
replication loses what the old primary acknowledged and had not sent on; the same for both).
One run, a few seconds: a figure per fault, not a distribution.
"""

from __future__ import annotations

import importlib
import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from lmcache_resp import BatchError, PagedRespStore, __version__
from lmcache_resp_servers.ports import HOST
from lmcache_resp_servers.sentinel import SentinelGroup
from lmcache_resp.bench.console import Console
from lmcache_resp.bench.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, BenchError
from lmcache_resp.bench.options import Options
from lmcache_resp.errors import RespError

__all__ = ["BATCH_KEYS", "FAULTS", "SCHEMA", "VALUE_BYTES", "Timeline", "run_sentinel_failover"]

SCHEMA = "lmcache-resp-bench-sentinel-failover/1"
FAULTS = ("kill", "failover")
BATCH_KEYS = 8
VALUE_BYTES = 64 * 1024
# Writing before the fault, and on the new primary before the run ends.
BEFORE_S = 1.0
AFTER_S = 1.5
# The run gives up on a client that never writes again after this long.
GIVE_UP_S = 30.0


@dataclass
class Timeline:
    """One client's batches: (start, end, keys failed, first error) relative to the run's start."""

    name: str
    batches: list[tuple[float, float, int, str]] = field(default_factory=list)
    acknowledged: list[str] = field(default_factory=list)

    def figures(self, fault_at: float) -> dict[str, Any]:
        failed = [b for b in self.batches if b[2] > 0]
        last_failure_end = max((b[1] for b in failed), default=fault_at)
        back = next((b[1] for b in self.batches if b[0] >= last_failure_end and b[2] == 0 and b[0] >= fault_at), None)
        return {
            "batches": len(self.batches),
            "failed_batches": len(failed),
            "failed_keys": sum(b[2] for b in failed),
            "failing_s": round(failed[-1][1] - failed[0][0], 3) if failed else 0.0,
            "back_after_s": None if back is None else round(back - fault_at, 3),
            "first_error": failed[0][3] if failed else None,
        }


def _ours(group: SentinelGroup, options: Options, timeline: Timeline, clock: float, stop: threading.Event) -> None:
    with PagedRespStore(group.url, page_size=VALUE_BYTES, num_pages=BATCH_KEYS, timeout=options.timeout,
                        connect_timeout=1.0, num_workers=2) as store:
        pages = store.allocate_many(BATCH_KEYS)
        for page in pages:
            page.byte_array[:] = os.urandom(VALUE_BYTES)
        batch = 0
        while not stop.is_set():
            keys = [f"ours-{batch}-{i}" for i in range(BATCH_KEYS)]
            began = time.monotonic() - clock
            try:
                store.put(keys, pages)
                failed: list[int] = []
                error = ""
            except BatchError as exc:
                failed = sorted(exc.errors)
                error = f"{type(exc.errors[failed[0]]).__name__}: {exc.errors[failed[0]]}"
                time.sleep(0.01)  # as redis-py's loop: keys fail at once while no primary is known
            timeline.batches.append((began, time.monotonic() - clock, len(failed), error))
            timeline.acknowledged += [k for i, k in enumerate(keys) if i not in failed]
            batch += 1
        for page in pages:
            store.free(page)


def _redis_py(group: SentinelGroup, options: Options, timeline: Timeline, clock: float, stop: threading.Event) -> None:
    try:
        redis_sentinel: Any = importlib.import_module("redis.sentinel")
    except ImportError as exc:  # pragma: no cover - redis is a dev and "compare" dependency
        raise BenchError("--sentinel-failover compares with redis-py: pip install 'lmcache-resp[compare]'") from exc
    sentinel = redis_sentinel.Sentinel([(HOST, port) for port in group.sentinel_ports], socket_timeout=options.timeout,
                        socket_connect_timeout=1.0)
    primary = sentinel.master_for(group.service, socket_timeout=options.timeout, socket_connect_timeout=1.0)
    value = os.urandom(VALUE_BYTES)
    batch = 0
    while not stop.is_set():
        keys = [f"redis-py-{batch}-{i}" for i in range(BATCH_KEYS)]
        began = time.monotonic() - clock
        try:
            pipe = primary.pipeline(transaction=False)
            for key in keys:
                pipe.set(key, value)
            pipe.execute()
            ok, error = True, ""
        except Exception as exc:  # noqa: BLE001 - every failure of the peer is a failed batch
            ok, error = False, f"{type(exc).__name__}: {exc}"
            time.sleep(0.01)  # redis-py fails at once while it has no primary: do not spin
        timeline.batches.append((began, time.monotonic() - clock, 0 if ok else BATCH_KEYS, error))
        if ok:
            timeline.acknowledged += keys
        batch += 1


def _missing(group: SentinelGroup, keys: list[str]) -> int:
    """Acknowledged keys the current primary does not hold."""
    redis: Any = importlib.import_module("redis")
    client = redis.Redis(host=HOST, port=group.primary_port(), socket_timeout=10)
    missing = 0
    for start in range(0, len(keys), 500):
        pipe = client.pipeline(transaction=False)
        for key in keys[start:start + 500]:
            pipe.exists(key)
        missing += sum(1 for found in pipe.execute() if not found)
    return missing


def _measure(options: Options, console: Console) -> dict[str, Any]:
    console.say(f"lmcache-resp {__version__}: Sentinel failover ({options.sentinel_fault}), {BATCH_KEYS} keys x "
                f"{VALUE_BYTES // 1024} KiB per batch, timeout {options.timeout:g} s")
    with SentinelGroup(server=options.server) as group:
        clock = time.monotonic()
        stop = threading.Event()
        timelines = [Timeline("lmcache_resp"), Timeline("redis-py")]
        errors: list[BaseException] = []

        def guarded(work: Any, timeline: Timeline) -> None:
            try:
                work(group, options, timeline, clock, stop)
            except BaseException as exc:  # noqa: BLE001 - reported after the run
                errors.append(exc)

        threads = [threading.Thread(target=guarded, args=(work, timeline), daemon=True)
                   for work, timeline in zip((_ours, _redis_py), timelines)]
        for thread in threads:
            thread.start()
        time.sleep(BEFORE_S)
        old = group.primary_port()
        fault_at = time.monotonic() - clock
        if options.sentinel_fault == "kill":
            group.server_on(old).kill()
        else:
            group.sentinel_command(0, "SENTINEL", "FAILOVER", group.service)
        group.wait_for_new_primary(old, timeout=GIVE_UP_S)
        switched_at = time.monotonic() - clock
        deadline = time.monotonic() + GIVE_UP_S
        while time.monotonic() < deadline and not errors:
            now = time.monotonic() - clock
            if all(any(b[0] >= switched_at and b[2] == 0 for b in t.batches) for t in timelines) and now > switched_at + AFTER_S:
                break
            time.sleep(0.05)
        stop.set()
        for thread in threads:
            thread.join(timeout=options.timeout + 10)
        if errors:
            raise errors[0]
        clients = {}
        for timeline in timelines:
            figures = timeline.figures(fault_at)
            figures["lost_keys"] = _missing(group, timeline.acknowledged)
            figures["acknowledged_keys"] = len(timeline.acknowledged)
            clients[timeline.name] = figures
    return {
        "schema": SCHEMA,
        "mode": "sentinel-failover",
        "fault": options.sentinel_fault,
        "server": options.server,
        "timeout_s": options.timeout,
        "sentinels_switched_after_s": round(switched_at - fault_at, 3),
        "clients": clients,
    }


def _lines(result: dict[str, Any]) -> list[str]:
    lines = [f"the Sentinels named the new primary {result['sentinels_switched_after_s']:.2f} s after the fault"]
    header = f"{'client':<14}{'failed keys':>12}{'failing':>10}{'back after':>12}{'lost':>7}  first error"
    lines.append(header)
    for name, f in result["clients"].items():
        back = "never" if f["back_after_s"] is None else f"{f['back_after_s']:.2f} s"
        lines.append(f"{name:<14}{f['failed_keys']:>12}{f['failing_s']:>8.2f} s{back:>12}{f['lost_keys']:>7}  "
                     f"{(f['first_error'] or '-')[:100]}")
    return lines


def run_sentinel_failover(options: Options, *, stdout: TextIO, stderr: TextIO) -> int:
    """The --sentinel-failover run; returns the exit status."""
    console = Console(stdout, stderr, json_mode=options.json)
    try:
        result = _measure(options, console)
    except BenchError as exc:
        console.warn(f"error: {exc}")
        return EXIT_USAGE
    except (RespError, OSError) as exc:
        console.warn(f"error: the run failed: {type(exc).__name__}: {exc}")
        return EXIT_FAILED
    except KeyboardInterrupt:
        console.warn("interrupted")
        return EXIT_INTERRUPTED
    finally:
        console.progress.close()
    if options.json:
        print(json.dumps(result, indent=2), file=stdout, flush=True)
    else:
        for line in _lines(result):
            console.say(line)
    return EXIT_OK
