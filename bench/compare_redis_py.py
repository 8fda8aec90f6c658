"""RedisClient against redis-py: one connection each, the same server, alternating rounds.

    python bench/compare_redis_py.py [--value-mb 4] [--keys 200] [--rounds 5] [--host H --port P]

Without --host it starts a throwaway redis-server (no persistence) on a free port and stops it
afterwards. Throughput is payload bytes per second in decimal GB/s (1 GB = 1e9 bytes). Every
value read back is verified byte for byte after the timed sections.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def timed(run: Callable[[], None]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--value-mb", type=float, default=4.0, help="value size in MiB (default 4)")
    parser.add_argument("--keys", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--host")
    parser.add_argument("--port", type=int, default=6379)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    import redis

    import lmcache_resp

    size = int(args.value_mb * (1 << 20))
    rng = np.random.default_rng(7)
    values = [rng.integers(0, 256, size, dtype=np.uint8) for _ in range(args.keys)]
    ours_out = [np.empty(size, dtype=np.uint8) for _ in range(args.keys)]
    keys = [f"bench:compare:{i}" for i in range(args.keys)]
    total_bytes = size * args.keys

    from lmcache_resp.bench.target import recommended_io_threads
    from lmcache_resp_servers import RedisServer

    throwaway = RedisServer(io_threads=recommended_io_threads(), server="redis") if args.host is None else None
    with throwaway or _given(args.host, args.port) as server:
        host, port = server.host, server.port
        ours = lmcache_resp.RedisClient(host, port, timeout=60)
        theirs = redis.Redis(host=host, port=port, socket_timeout=60)
        from redis.utils import HIREDIS_AVAILABLE

        parser_name = "the hiredis parser" if HIREDIS_AVAILABLE else "the pure-Python parser"
        theirs_out: list[bytes | None] = [None] * args.keys

        def ours_set() -> None:
            for key, value in zip(keys, values):
                ours.set(key, value)

        def ours_get() -> None:
            for key, out in zip(keys, ours_out):
                ours.get(key, out)

        def theirs_set() -> None:
            for key, value in zip(keys, values):
                theirs.set(key, memoryview(value))

        def theirs_get() -> None:
            for i, key in enumerate(keys):
                theirs_out[i] = theirs.get(key)

        samples: dict[str, list[float]] = {name: [] for name in
                                           ("lmcache_resp SET", "redis-py SET", "lmcache_resp GET", "redis-py GET")}
        # One untimed round first: the server's allocator and both clients' pages warm up.
        for do in (ours_set, theirs_set, ours_get, theirs_get):
            do()
        for round_index in range(args.rounds):
            # Alternate who goes first so neither always runs on a warmer server.
            pairs = [("lmcache_resp", ours_set, ours_get), ("redis-py", theirs_set, theirs_get)]
            if round_index % 2:
                pairs.reverse()
            for name, do_set, do_get in pairs:
                samples[f"{name} SET"].append(total_bytes / timed(do_set) / 1e9)
                samples[f"{name} GET"].append(total_bytes / timed(do_get) / 1e9)

        for i, value in enumerate(values):
            assert np.array_equal(ours_out[i], value), f"lmcache_resp read back wrong bytes for key {i}"
            assert theirs_out[i] == value.tobytes(), f"redis-py read back wrong bytes for key {i}"
        pipe = theirs.pipeline()
        for key in keys:
            pipe.delete(key)
        pipe.execute()
        ours.close()
        theirs.close()

    medians = {name: statistics.median(v) for name, v in samples.items()}
    report = {
        "workload": f"{args.keys} x {args.value_mb:g} MiB, one connection each, {args.rounds} alternating rounds after 1 warm-up",
        "redis_py": redis.__version__,
        "redis_py_parser": parser_name,
        "python": platform.python_version(),
        "medians_gb_per_s": medians,
        "samples_gb_per_s": samples,
        "ratio_set": medians["lmcache_resp SET"] / medians["redis-py SET"],
        "ratio_get": medians["lmcache_resp GET"] / medians["redis-py GET"],
    }
    print(f"workload: {report['workload']} (GB = 1e9 bytes of payload)")
    print(f"redis-py {redis.__version__} with {parser_name}")
    for name, value in medians.items():
        print(f"  {name:18s} median {value:6.3f} GB/s   samples " + " ".join(f"{s:.3f}" for s in samples[name]))
    print(f"ratio lmcache_resp / redis-py: SET {report['ratio_set']:.2f}x, GET {report['ratio_get']:.2f}x")
    print("all values verified byte for byte")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


@contextmanager
def _given(host: str, port: int) -> Iterator[argparse.Namespace]:
    yield argparse.Namespace(host=host, port=port)


if __name__ == "__main__":
    main()
