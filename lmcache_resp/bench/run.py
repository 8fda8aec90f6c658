"""One benchmark run from validated options to exit status: the server, the clients, the
rounds, the report, and deleting every key written whatever happens."""

from __future__ import annotations

from contextlib import nullcontext

import json
from typing import TextIO

from lmcache_resp.errors import AuthenticationError, RespError
from lmcache_resp.bench import report
from lmcache_resp.bench.ceiling import measure_ceiling
from lmcache_resp.bench.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, BenchError, PeerFailed
from lmcache_resp.bench.options import Options
from lmcache_resp.bench.console import Console
from lmcache_resp.bench.fleet import MODES, FleetDriver
from lmcache_resp.bench.flood import measure_neighbour_flood
from lmcache_resp.bench.lmcache_l2 import L2Result, run_lmcache_l2
from lmcache_resp.bench.measure import Driver, run_rounds
from lmcache_resp.bench.ours import OursDriver
from lmcache_resp.bench.peers import CLUSTER_PEERS, make_peer
from lmcache_resp.bench.sweep import plot_sweep, run_sweep
from lmcache_resp.bench.target import KeyLedger, Target, open_target, peer_target
from lmcache_resp.bench.workload import Mismatch, VerificationError, Workload

__all__ = ["run"]


def run(options: Options, *, stdout: TextIO, stderr: TextIO) -> int:
    console = Console(stdout, stderr, json_mode=options.json)
    ledger = KeyLedger()

    def failed(status: int, error: str, mismatches: list[Mismatch] | None = None) -> int:
        if options.json:
            _print_json(stdout, report.failure_json(options, error, mismatches))
        return status

    l2: L2Result | None = None
    try:
        with open_target(options, console, ledger.prefix) as target:
            for line in report.header_lines(options, target):
                console.say(line)
            try:
                if options.lmcache_l2:
                    l2 = _lmcache_l2(options, target, console)
                elif options.sweep:
                    result = _sweep(options, target, ledger, console)
                elif options.neighbour_flood:
                    result = _neighbour_flood(options, target, ledger, console)
                elif options.bridge:
                    result = _fleets(options, target, ledger, console)
                else:
                    result = _standard(options, target, ledger, console)
            finally:
                _delete_keys(ledger, target, console)
    except VerificationError as exc:
        console.warn("VERIFICATION FAILED: data read back differs from what was written")
        for m in exc.mismatches[:20]:
            console.warn(f"  {m.describe()}")
        return failed(EXIT_FAILED, str(exc), exc.mismatches)
    except BenchError as exc:
        console.warn(f"error: {exc}")
        return failed(EXIT_USAGE, str(exc))
    except RespError as exc:
        console.warn(f"error: the run failed: {type(exc).__name__}: {exc}")
        return failed(EXIT_FAILED, f"{type(exc).__name__}: {exc}")
    except KeyboardInterrupt:
        console.warn("interrupted: the keys written were deleted" if not options.embedded else "interrupted")
        return EXIT_INTERRUPTED
    finally:
        console.progress.close()
    if l2 is not None:
        return _l2_outcome(l2, console, stdout)
    if options.json:
        _print_json(stdout, report.result_json(result))
    never_ran = report.peers_that_never_ran(result)
    for name, why in never_ran:
        console.warn(f"error: --compare {name}: the peer could not run (it failed in its first, untimed round, so "
                     f"there is nothing to compare): {why}")
    if never_ran:
        return EXIT_USAGE
    if not options.json:
        # Only now: every GET of every round has been verified (a mismatch raised above).
        console.say("All tests passed")
    return EXIT_OK


def _lmcache_l2(options: Options, target: Target, console: Console) -> L2Result:
    result = run_lmcache_l2(options, target, console)
    for line in result.lines():
        console.say(line)
    return result


def _l2_outcome(result: L2Result, console: Console, stdout: TextIO) -> int:
    """The JSON document or the last line, and the exit status: 1 when any run failed."""
    failures = len(result.failures)
    if result.options.json:
        doc = report.json_base(result.options)
        doc.update(server=result.target.describe(), **result.to_json())
        _print_json(stdout, doc)
    if failures:
        console.warn(f"FAILED: {failures} lmcache bench l2 run(s) failed or came up short (listed above; left out of "
                     "the figures)")
        return EXIT_FAILED
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


def _standard(options: Options, target: Target, ledger: KeyLedger, console: Console) -> report.RunResult:
    result = report.RunResult(options, target, ledger.prefix)
    workload = Workload(ledger.keys("lmcache_resp", options.num_keys), options.chunk_bytes, options.seed)
    ours = OursDriver(
        target,
        workload,
        num_workers=options.ours_workers,
        cpu_affinity=options.cpu_affinity,
        get_piece_bytes=options.get_piece_bytes,
        connections_per_worker=options.ours_connections_per_worker,
    )
    drivers: list[Driver] = [ours]
    # A peer that reaches a cluster runs on ours; the others on one server (peer_target).
    on_ours = [name for name in options.compare if name in CLUSTER_PEERS and target.settings.cluster]
    single = [name for name in options.compare if name not in on_ours]
    with peer_target(options, target, console) if single else nullcontext(target) as peers_at:
        try:
            for name in options.compare:
                # A peer asked for that cannot start ends the run (BenchError: exit status 2).
                try:
                    drivers.append(make_peer(name, options, target if name in on_ours else peers_at, ours, ledger))
                except PeerFailed as exc:
                    raise BenchError(f"--compare {name}: could not start: {exc}") from None
            console.progress.add_total((options.rounds + 1) * len(drivers) + 1)
            result.clients = run_rounds(drivers, options.ops, options.rounds, console)
            console.progress.start("latency pass")
            result.latency = ours.measure_latency(options.ops)
            console.progress.advance()
            result.stats = ours.store.stats().to_dict()
        finally:
            _close_all(drivers, console)
    latency_gets = result.latency["get"].count if "get" in result.latency else 0
    gets = options.rounds + 1 if "get" in options.ops else 0  # the warm-up round is verified too
    result.verified_get_batches = gets
    result.verified_bytes = gets * workload.batch_bytes + latency_gets * options.chunk_bytes
    if options.ceiling:
        # After the clients are closed: the probe keeps every core busy.
        console.progress.start("loopback ceiling")
        result.ceiling = measure_ceiling(options.chunk_bytes, pool_bytes=options.pool_bytes)
    return _reported(result, console)


def _fleets(options: Options, target: Target, ledger: KeyLedger, console: Console) -> report.RunResult:
    """K processes through one bridge, then (order rotating per round) K with a store each."""
    result = report.RunResult(options, target, ledger.prefix)
    k = options.clients
    drivers: list[Driver] = []
    try:
        for mode in MODES:
            keys = [ledger.keys(f"{mode}{k}-c{i}", options.num_keys) for i in range(k)]
            console.progress.start(f"starting the {mode} fleet")
            drivers.append(FleetDriver(
                mode, k, target, keys, chunk_bytes=options.chunk_bytes, num_workers=options.num_workers,
                seed=options.seed, timeout=options.timeout, cpu_affinity=options.cpu_affinity,
                client_inflight_mib=options.client_inflight_mib,
            ))
        console.progress.add_total((options.rounds + 1) * len(drivers))
        result.clients = run_rounds(drivers, options.ops, options.rounds, console)
    finally:
        _close_all(drivers, console)
    gets = options.rounds + 1 if "get" in options.ops else 0
    result.verified_get_batches = gets * k * len(drivers)
    result.verified_bytes = result.verified_get_batches * options.num_keys * options.chunk_bytes
    return _reported(result, console)


def _neighbour_flood(options: Options, target: Target, ledger: KeyLedger, console: Console) -> report.RunResult:
    """Client 0's small batches, quiet and beside K-1 flooding clients, through the bridge and
    with independent stores; every client's keys read back and verified afterwards."""
    result = report.RunResult(options, target, ledger.prefix)
    result.neighbour_flood = measure_neighbour_flood(options, target, ledger, console)
    result.verified_get_batches = options.clients * len(result.neighbour_flood)
    result.verified_bytes = result.verified_get_batches * options.pool_bytes
    for line in report.flood_lines(result):
        console.say(line)
    console.say(report.verified_line(result))
    return result


def _reported(result: report.RunResult, console: Console) -> report.RunResult:
    """Says the side-by-side report and what was verified; returns the result."""
    for line in report.standard_lines(result):
        console.say(line)
    console.say(report.verified_line(result))
    return result


def _sweep(options: Options, target: Target, ledger: KeyLedger, console: Console) -> report.RunResult:
    result = report.RunResult(options, target, ledger.prefix)
    sweep = result.sweep = run_sweep(options, target, ledger, console)
    # Each point's rounds plus its (verified) warm-up round.
    result.verified_get_batches = sum(len(p.result.samples["get"]) + 1 for p in sweep.points)
    result.verified_bytes = sum((len(p.result.samples["get"]) + 1) * p.keys * p.chunk_bytes for p in sweep.points)
    for line in report.sweep_lines(result):
        console.say(line)
    if options.plot is not None:
        plot_sweep(sweep, options.plot, title=f"lmcache_resp PagedRespStore against {target.endpoint}")
        console.say(f"plot written to {options.plot}")
    console.say(report.verified_line(result))
    return result
