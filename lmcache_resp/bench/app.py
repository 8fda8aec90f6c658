"""One benchmark run from validated options to exit status: the server, the clients, the
rounds, the report, and deleting every key written whatever happens."""

from __future__ import annotations

import json
from typing import TextIO

from lmcache_resp.errors import AuthenticationError, RespError
from lmcache_resp.bench import report
from lmcache_resp.bench.ceiling import measure_ceiling
from lmcache_resp.bench.console import Console
from lmcache_resp.bench.driver import Driver
from lmcache_resp.bench.errors import BenchError, VerificationError
from lmcache_resp.bench.jsonreport import failure_json, result_json
from lmcache_resp.bench.keyspace import KeyLedger, new_prefix
from lmcache_resp.bench.latency import measure_latency
from lmcache_resp.bench.options import Options
from lmcache_resp.bench.ours import OursDriver
from lmcache_resp.bench.peers.registry import make_peer
from lmcache_resp.bench.progress import Progress
from lmcache_resp.bench.results import RunResult
from lmcache_resp.bench.rounds import run_rounds
from lmcache_resp.bench.sweep import run_sweep
from lmcache_resp.bench.target import Target, open_target
from lmcache_resp.bench.units import GB
from lmcache_resp.bench.workload import Workload

__all__ = ["run"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def run(options: Options, *, stdout: TextIO, stderr: TextIO) -> int:
    console = Console(stdout, stderr, json_mode=options.json)
    console.progress = Progress(0, stderr, enabled=not options.json)
    ledger = KeyLedger(new_prefix())
    try:
        with open_target(options, console, ledger.prefix) as target:
            console.say(report.workload_line(options))
            console.say(report.units_line())
            try:
                result = _sweep(options, target, ledger, console) if options.sweep else _standard(options, target, ledger, console)
            finally:
                _delete_keys(ledger, target, console)
    except VerificationError as exc:
        console.warn("VERIFICATION FAILED: data read back differs from what was written")
        for m in exc.mismatches[:20]:
            console.warn(f"  {m.describe()}")
        if options.json:
            _print_json(stdout, failure_json(options, str(exc), exc.mismatches))
        return EXIT_FAILED
    except BenchError as exc:
        console.warn(f"error: {exc}")
        if options.json:
            _print_json(stdout, failure_json(options, str(exc)))
        return EXIT_USAGE
    except RespError as exc:
        console.warn(f"error: the run failed: {type(exc).__name__}: {exc}")
        if options.json:
            _print_json(stdout, failure_json(options, f"{type(exc).__name__}: {exc}"))
        return EXIT_FAILED
    except KeyboardInterrupt:
        console.warn("interrupted: the keys written were deleted" if not options.embedded else "interrupted")
        return EXIT_INTERRUPTED
    finally:
        console.progress.close()
    if options.json:
        _print_json(stdout, result_json(result))
    else:
        # Only now: every GET of every round has been verified (a mismatch raised above).
        console.say("All tests passed")
    return EXIT_OK


def _print_json(stdout: TextIO, doc: object) -> None:
    print(json.dumps(doc, indent=2), file=stdout, flush=True)


def _delete_keys(ledger: KeyLedger, target: Target, console: Console) -> None:
    try:
        ledger.delete_all(target)
    except AuthenticationError:
        pass  # the run used the same credentials: refused now, it could not have written either
    except (RespError, OSError) as exc:
        console.warn(f"warning: could not delete this run's keys (prefix {ledger.prefix!r}): {exc}")


def _close_all(drivers: list[Driver], console: Console) -> None:
    """Peers first, lmcache_resp last (redis-py sends from its pages); one failing close does
    not keep the others open."""
    for driver in reversed(drivers):
        try:
            driver.close()
        except Exception as exc:  # noqa: BLE001 - reported, the run's own outcome stands
            console.warn(f"warning: closing {driver.name} failed: {type(exc).__name__}: {exc}")


def _standard(options: Options, target: Target, ledger: KeyLedger, console: Console) -> RunResult:
    result = RunResult(options, target, ledger.prefix)
    workload = Workload(ledger.keys("lmcache_resp", options.num_keys), options.chunk_bytes, options.seed)
    ours = OursDriver(target, workload, num_workers=options.num_workers, cpu_affinity=options.cpu_affinity)
    drivers: list[Driver] = [ours]
    try:
        for name in options.compare:
            try:
                drivers.append(make_peer(name, options, target, ours, ledger))
            except BenchError as exc:
                result.unavailable[name] = str(exc)
                console.warn(f"peer {name} not measured: {exc}")
        console.progress.add_total((options.rounds + 1) * len(drivers) + 1)
        result.clients = run_rounds(drivers, options.ops, options.rounds, console)
        console.progress.start("latency pass")
        result.latency = measure_latency(ours, options.ops)
        console.progress.advance()
    finally:
        _close_all(drivers, console)
    latency_gets = result.latency["get"].count if "get" in result.latency else 0
    gets = options.rounds + 1 if "get" in options.ops else 0  # the warm-up round is verified too
    result.verified_get_batches = gets
    result.verified_bytes = gets * workload.batch_bytes + latency_gets * options.chunk_bytes
    if options.ceiling:
        # After the clients are closed: the probe keeps every core busy.
        console.progress.start("loopback ceiling")
        result.ceiling = measure_ceiling(options.chunk_bytes)
    for line in report.batch_lines(result) + report.detail_lines(result) + report.compare_lines(result) + report.ceiling_lines(result):
        console.say(line)
    console.say(_verified_line(result))
    return result


def _sweep(options: Options, target: Target, ledger: KeyLedger, console: Console) -> RunResult:
    result = RunResult(options, target, ledger.prefix)
    result.sweep = run_sweep(options, target, ledger, console)
    points = {(p.chunk_bytes, p.num_workers): p for p in result.sweep.by_chunk + result.sweep.by_workers}
    # Each point's rounds plus its (verified) warm-up round.
    result.verified_get_batches = sum(len(p.result.samples["get"]) + 1 for p in points.values())
    result.verified_bytes = sum((len(p.result.samples["get"]) + 1) * p.keys * p.chunk_bytes for p in points.values())
    for line in report.sweep_lines(result):
        console.say(line)
    if options.plot is not None:
        from lmcache_resp.bench.plot import plot_sweep

        plot_sweep(result.sweep, options.plot, title=f"lmcache_resp PagedRespStore against {target.endpoint}")
        console.say(f"plot written to {options.plot}")
    console.say(_verified_line(result))
    return result


def _verified_line(result: RunResult) -> str:
    latency = " and the latency pass" if result.latency and "get" in result.latency else ""
    return (f"verified: every byte lmcache_resp read back ({result.verified_get_batches} GET batches including "
            f"warm-ups{latency}, {result.verified_bytes / GB:.3f} GB) matched what was written")
