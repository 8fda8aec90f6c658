"""``python -m lmcache_resp.bench``: the command line (compatible with LMCache's Redis benchmark:
--host, --port, --chunk-mb, --num-workers, --num-keys, --username, --password) and its exit codes.

Exit status: 0 when every byte read back was verified, 1 when verification failed, 2 for a
configuration or environment problem, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from lmcache_resp.config import ENV_PASSWORD, Secret
from lmcache_resp.bench.options import ALL_OPS, DEFAULT_OPS, DEFAULT_SWEEP_CHUNKS, DEFAULT_SWEEP_WORKERS, PEERS, Options
from lmcache_resp.bench.units import MiB, mib_to_bytes

__all__ = ["build_parser", "main", "parse_options"]

DESCRIPTION = """\
Batch SET/GET/EXISTS throughput of lmcache_resp.PagedRespStore against Redis, verified byte for byte.

Without --host/--port/--url it starts a throwaway local redis-server (no persistence) and stops it
afterwards. With a server of yours it never flushes: every key it writes carries a unique prefix
(lmcache-resp-bench:<uuid4>:) and is deleted afterwards, also on errors and Ctrl-C.
"""

EPILOG = """\
A batch is all --num-keys keys in ONE put/get/exists call. GB = 1e9 bytes of payload.
The password can also come from $LMCACHE_RESP_PASSWORD (it is never printed).
Exit status: 0 all verified, 1 data read back differs, 2 bad configuration, 130 interrupted.
"""

MAX_CHUNK_MIB = 512.0  # Redis's proto-max-bulk-len default
MIN_CHUNK_BYTES = 64
CPU_AFFINITY = re.compile(r"^(auto|none|numa:\d+|\d+(-\d+)?(,\d+(-\d+)?)*)$")


def _int_in(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer in {low}..{high}, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be an integer in {low}..{high}, got {value}")
        return value

    return parse


def _positive_float(high: float, what: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number of {what} in (0, {high:g}], got {text!r}") from None
        if not math.isfinite(value) or not 0 < value <= high:
            raise argparse.ArgumentTypeError(f"must be a number of {what} in (0, {high:g}], got {text!r}")
        return value

    return parse


def _chunk_mib(text: str) -> float:
    value = _positive_float(MAX_CHUNK_MIB, "MiB")(text)
    if mib_to_bytes(value) < MIN_CHUNK_BYTES:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_CHUNK_BYTES} bytes ({MIN_CHUNK_BYTES / MiB:g} MiB), got {text!r}")
    return value


def _choices(allowed: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(dict.fromkeys(name.strip().lower() for name in text.split(",") if name.strip()))
        unknown = [name for name in names if name not in allowed]
        if not names or unknown:
            shown = f"unknown {', '.join(repr(u) for u in unknown)}; " if unknown else ""
            raise argparse.ArgumentTypeError(f"{shown}give a comma list of {', '.join(allowed)}")
        return names

    return parse


def _list_of(item: Callable[[str], float | int]) -> Callable[[str], tuple[float | int, ...]]:
    def parse(text: str) -> tuple[float | int, ...]:
        parts = [part.strip() for part in text.split(",") if part.strip()]
        if not parts:
            raise argparse.ArgumentTypeError("give a comma list, e.g. 0.25,1,4")
        return tuple(item(part) for part in parts)

    return parse


def _cpu_affinity(text: str) -> str:
    if not CPU_AFFINITY.match(text.strip()):
        raise argparse.ArgumentTypeError(f"must be auto, none, numa:N or a CPU list like 0-3,8; got {text!r}")
    return text.strip()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m lmcache_resp.bench",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    server = parser.add_argument_group("server (default: a throwaway local redis-server)")
    server.add_argument("--host", help="Redis host of a running server (never flushed)")
    server.add_argument("--port", type=_int_in(1, 65535), help="Redis port (1..65535)")
    server.add_argument("--url", help="resp://host:port, redis://[user:pass@]host:port[/db] or unix:///path.sock")
    server.add_argument("--username", help="ACL user name")
    server.add_argument("--password", help=f"password (better: ${ENV_PASSWORD}; never printed)")
    server.add_argument("--io-threads", type=_int_in(1, 128), help="io-threads of the throwaway server (default: Redis's guidance for this machine)")
    server.add_argument("--timeout", type=_positive_float(3600, "seconds"), default=60.0,
                        help="per-key deadline in seconds, also the limit on each peer's wait (default 60)")

    workload = parser.add_argument_group("workload")
    workload.add_argument("--chunk-mb", type=_chunk_mib, default=4.0, help="value (page) size in MiB (default 4)")
    workload.add_argument("--num-workers", type=_int_in(1, 256), default=8, help="I/O worker threads (default 8)")
    workload.add_argument("--num-keys", type=_int_in(1, 1_000_000), default=500, help="keys per batch (default 500)")
    workload.add_argument("--rounds", type=_int_in(1, 100), default=3, help="rounds; the median is reported (default 3)")
    workload.add_argument("--ops", type=_choices(ALL_OPS), default=DEFAULT_OPS,
                          help=f"comma list of {','.join(ALL_OPS)} (default {','.join(DEFAULT_OPS)})")
    workload.add_argument("--cpu-affinity", type=_cpu_affinity, help="auto, none, a CPU list like 0-3,8, or numa:N")

    extra = parser.add_argument_group("extras")
    extra.add_argument("--json", action="store_true", help="machine-readable output only, on stdout")
    extra.add_argument("--sweep", action="store_true",
                       help="throughput against chunk size (256 KiB..32 MiB) and worker count (1..16)")
    extra.add_argument("--sweep-chunks", type=_list_of(_chunk_mib), help="chunk sizes in MiB for --sweep, e.g. 0.25,1,4")
    extra.add_argument("--sweep-workers", type=_list_of(_int_in(1, 256)), help="worker counts for --sweep, e.g. 1,2,4,8")
    extra.add_argument("--plot", type=Path, metavar="FILE.png", help="draw the sweep (implies --sweep; needs matplotlib)")
    extra.add_argument("--compare", type=_choices(PEERS), default=(), help=f"peers side by side: comma list of {','.join(PEERS)}")
    extra.add_argument("--lmcache-python", metavar="PATH", help="a Python that can import LMCache's connector (lmcache_peer)")
    extra.add_argument("--ceiling", action="store_true", help="also measure the loopback socket ceiling (no Redis in the path)")
    return parser


def parse_options(argv: Sequence[str] | None = None) -> Options:
    """Parses and validates; a bad value exits through argparse (status 2) naming the option."""
    parser = build_parser()
    args = parser.parse_args(argv)
    given_server = args.host is not None or args.port is not None or args.url is not None
    if args.io_threads is not None and given_server:
        parser.error("--io-threads configures the throwaway server: it cannot be used with --host/--port/--url")
    if not given_server and (args.username or args.password):
        parser.error("--username/--password need --host/--port or --url (the throwaway server has no password)")
    sweep = bool(args.sweep or args.plot is not None or args.sweep_chunks or args.sweep_workers)
    if sweep and args.compare:
        parser.error("--compare cannot be combined with --sweep (compare at one chunk size, sweep without peers)")
    if sweep and args.ceiling:
        parser.error("--ceiling cannot be combined with --sweep")
    if args.lmcache_python is not None:
        if "lmcache" not in args.compare:
            parser.error("--lmcache-python is only used with --compare lmcache")
        if not (os.path.isfile(args.lmcache_python) and os.access(args.lmcache_python, os.X_OK)):
            parser.error(f"--lmcache-python: {args.lmcache_python!r} is not an executable file")
    if args.plot is not None and not args.plot.parent.is_dir():
        parser.error(f"--plot: the folder {str(args.plot.parent)!r} does not exist")
    # $LMCACHE_RESP_PASSWORD (and $LMCACHE_RESP_USERNAME) are read when the connection is resolved.
    password = args.password
    options = Options(
        host=args.host,
        port=args.port,
        url=args.url,
        username=args.username,
        password=Secret(password) if password else None,
        chunk_bytes=mib_to_bytes(args.chunk_mb),
        num_workers=args.num_workers,
        num_keys=args.num_keys,
        rounds=args.rounds,
        ops=tuple(op for op in ALL_OPS if op in args.ops),
        json=args.json,
        sweep=sweep,
        sweep_chunks=tuple(mib_to_bytes(c) for c in args.sweep_chunks) if args.sweep_chunks else DEFAULT_SWEEP_CHUNKS,
        sweep_workers=tuple(int(w) for w in args.sweep_workers) if args.sweep_workers else DEFAULT_SWEEP_WORKERS,
        plot=args.plot,
        compare=tuple(args.compare),
        lmcache_python=args.lmcache_python,
        ceiling=args.ceiling,
        timeout=args.timeout,
        io_threads=args.io_threads,
        cpu_affinity=args.cpu_affinity,
    )
    from lmcache_resp.bench.memory import memory_problem

    problem = memory_problem(options)
    if problem is not None:
        parser.error(problem)
    return options


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmark; returns the exit status (see the module docstring)."""
    options = parse_options(argv)
    # Imported here so that --help and argument errors work without numpy.
    from lmcache_resp.bench.app import run

    return run(options, stdout=sys.stdout, stderr=sys.stderr)

