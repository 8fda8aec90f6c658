"""A short demo: store and load a few values through a throwaway redis-server, then time
4 MiB SET/GET with RedisClient.

    python -m lmcache_resp.demo [--host H --port P] [--values 50]
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator

import lmcache_resp
from lmcache_resp.embedded import EmbeddedRedis


@contextlib.contextmanager
def _server(host: str | None, port: int | None) -> Iterator[tuple[str, int]]:
    if host is None and port is None:
        with EmbeddedRedis() as server:
            print(f"started a throwaway redis-server {server.version()} on {server.host}:{server.port}")
            yield server.host, server.port
        print("stopped the throwaway redis-server")
    else:
        yield host or "127.0.0.1", port or 6379


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--values", type=int, default=50, help="number of 4 MiB values to time (default 50)")
    args = parser.parse_args(argv)
    size = 4 << 20
    prefix = f"lmcache-resp-demo:{time.time_ns()}:"
    with _server(args.host, args.port) as (host, port), lmcache_resp.RedisClient(host, port) as client:
        greeting = bytearray(64)
        client.set(prefix + "hello", b"hello from lmcache-resp")
        length = client.get(prefix + "hello", greeting)
        print(f"stored and loaded {bytes(greeting[:length or 0])!r}")
        assert client.get(prefix + "absent", greeting) is None

        values = [bytes([i % 251]) * size for i in range(args.values)]
        started = time.perf_counter()
        for i, value in enumerate(values):
            client.set(f"{prefix}{i}", value)
        set_seconds = time.perf_counter() - started
        dest = bytearray(size)
        started = time.perf_counter()
        for i in range(args.values):
            client.get(f"{prefix}{i}", dest)
        get_seconds = time.perf_counter() - started
        for i, value in enumerate(values):
            assert client.get(f"{prefix}{i}", dest) == size and dest == value, f"value {i} differs"
            client.delete(f"{prefix}{i}")
        client.delete(prefix + "hello")
        total = size * args.values
        print(f"4 MiB SET: {total / set_seconds / 1e9:.2f} GB/s, 4 MiB GET: {total / get_seconds / 1e9:.2f} GB/s "
              f"({args.values} values, one connection, GB = 1e9 bytes); all values verified")


if __name__ == "__main__":
    main()
