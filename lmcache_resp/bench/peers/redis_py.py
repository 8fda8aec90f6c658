"""redis-py as a peer: num_workers threads over one ConnectionPool, each thread doing its tile
of keys one command after another (SET from memoryviews of the same pages lmcache_resp uses;
GET results kept, and verified after the timed section; EXISTS/DEL pipelined per thread)."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lmcache_resp.bench import pattern
from lmcache_resp.bench.errors import BenchError, PeerFailed
from lmcache_resp.bench.peers.tiles import tiles
from lmcache_resp.bench.samples import OpSample, timed
from lmcache_resp.bench.target import Target
from lmcache_resp.bench.workload import Workload

__all__ = ["RedisPyPeer"]


class RedisPyPeer:
    name = "redis-py"

    def __init__(self, target: Target, workload: Workload, buffers: Sequence[pattern.Bytes], *, num_workers: int) -> None:
        try:
            # Imported by name: redis-py is an optional extra (lmcache-resp[compare]).
            redis: Any = importlib.import_module("redis")
            connection: Any = importlib.import_module("redis.connection")
            utils: Any = importlib.import_module("redis.utils")
        except ImportError:
            raise BenchError("--compare redis-py: redis-py is not installed (pip install 'redis[hiredis]')") from None
        self.workload, self.buffers = workload, buffers
        self.num_workers = num_workers
        self.version = str(redis.__version__)
        self.parser = "hiredis" if utils.HIREDIS_AVAILABLE else "pure-Python"
        s = target.settings
        kwargs: dict[str, Any] = {
            "username": s.username, "password": s.password.reveal() if s.password is not None else None, "db": s.db,
            "socket_timeout": s.timeout, "socket_connect_timeout": s.timeout, "max_connections": num_workers,
        }
        if s.unix_path is not None:
            kwargs.update(connection_class=redis.UnixDomainSocketConnection, path=s.unix_path)
        else:
            kwargs.update(host=s.host, port=s.port)
        # hiredis's packer copies every value into one bytes object; redis-py's own serializer
        # sends memoryviews as they are. The faster choice is the fair one.
        self.packer = "hiredis packer (copies values)"
        base = getattr(connection, "AbstractConnection", connection.Connection)
        if "command_packer" in inspect.signature(base.__init__).parameters:
            encoder = connection.Encoder("utf-8", "strict", False)
            kwargs["command_packer"] = connection.PythonRespSerializer(6000, encoder.encode)
            self.packer = "PythonRespSerializer (memoryview values, no copy)"
        self._errors: tuple[type[BaseException], ...] = (redis.exceptions.RedisError, OSError)
        try:
            self.pool = redis.ConnectionPool(**kwargs)
            self.client = redis.Redis(connection_pool=self.pool)
            self._open_connections()
        except self._errors as exc:
            raise BenchError(f"--compare redis-py: cannot connect to {target.endpoint}: {exc}") from None
        self.executor = ThreadPoolExecutor(num_workers, thread_name_prefix="redis-py-peer")
        self.tiles = tiles(len(workload.keys), num_workers)

    def _open_connections(self) -> None:
        """Connects all num_workers connections up front, so no round times a connect."""
        connections = [self.pool.get_connection() for _ in range(self.num_workers)]
        for c in connections:
            self.pool.release(c)

    def describe(self) -> str:
        return (f"redis-py {self.version} ({self.parser} parser, {self.packer}), {self.num_workers} threads over "
                "one ConnectionPool, each its tile of keys one command at a time")

    def supports(self, op: str) -> bool:
        return True

    def _parallel(self, work: Callable[[range], None]) -> None:
        for future in [self.executor.submit(work, tile) for tile in self.tiles]:
            future.result()

    def run_round(self, round_index: int, ops: Sequence[str]) -> dict[str, OpSample]:
        try:
            return self._round(round_index, ops)
        except self._errors as exc:
            raise PeerFailed(f"{type(exc).__name__}: {exc}") from exc

    def _round(self, round_index: int, ops: Sequence[str]) -> dict[str, OpSample]:
        w, keys, client, buffers = self.workload, self.workload.keys, self.client, self.buffers
        n, nbytes = len(keys), w.batch_bytes
        w.fill(buffers, round_index)

        def set_tile(tile: range) -> None:
            for i in tile:
                client.set(keys[i], buffers[i].data)  # a memoryview: no copy

        samples: dict[str, OpSample] = {}
        samples["set"], _ = timed("set", n, nbytes, lambda: self._parallel(set_tile))
        if "get" in ops:
            read: list[bytes | None] = [None] * n

            def get_tile(tile: range) -> None:
                for i in tile:
                    read[i] = client.get(keys[i])

            samples["get"], _ = timed("get", n, nbytes, lambda: self._parallel(get_tile))
            mismatches = w.verify(self.name, round_index, read)
            del read
            if mismatches:
                raise PeerFailed(f"GET read back wrong data: {mismatches[0].describe()}")
        if "exists" in ops:
            repeat = w.exists_repeat
            samples["exists"], answers = timed(
                "exists", n * repeat, 0, lambda: [self._pipelined("exists") for _ in range(repeat)]
            )
            for found in answers:
                if sum(found) != n:
                    raise PeerFailed(f"EXISTS found {sum(found)} of {n} keys just written")
        samples["delete"], _ = timed("delete", n, 0, lambda: self._pipelined("delete"))
        return {op: samples[op] for op in ops if op in samples}

    def _pipelined(self, command: str) -> list[int]:
        """EXISTS or DEL of every key, one pipeline per thread over its tile."""
        out: list[int] = [0] * len(self.workload.keys)

        def tile_work(tile: range) -> None:
            pipe = self.client.pipeline(transaction=False)
            for i in tile:
                getattr(pipe, command)(self.workload.keys[i])
            for i, value in zip(tile, pipe.execute()):
                out[i] = int(value)

        self._parallel(tile_work)
        return out

    def close(self) -> None:
        self.executor.shutdown(wait=True)
        self.pool.disconnect()
