"""Type stubs for the native module ``lmcache_resp._native`` (hand-written; checked against the
built module by ``mypy.stubtest`` in the test suite)."""

import sys
from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias, final


if sys.version_info >= (3, 12):
    from collections.abc import Buffer
else:
    from typing_extensions import Buffer

__all__ = ["Connector", "MAX_KEY_LEN", "Page", "PagedStore", "RedisClient", "__version__", "explain_placement", "loopback_ceiling"]

__version__: str

@final
class RedisClient:
    def __new__(
        cls,
        host: str | None,
        port: int,
        *,
        unix_path: str | None = None,
        username: str | None = None,
        password: str | None = None,
        db: int = 0,
        timeout: float = 10.0,
        connect_timeout: float | None = None,
    ) -> RedisClient: ...
    def set(self, key: str | bytes, buffer: Buffer) -> None: ...
    def get(self, key: str | bytes, buffer: Buffer) -> int | None: ...
    def exists(self, key: str | bytes) -> bool: ...
    def delete(self, key: str | bytes) -> bool: ...
    def ping(self) -> None: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def tcp_nodelay(self) -> bool | None: ...

MAX_KEY_LEN: int

def explain_placement(
    host: str | None,
    port: int,
    *,
    unix_path: str | None = None,
    cpu_affinity: str | None = None,
    num_workers: int = 8,
    topology_xml: str | None = None,
    interface: str | None = None,
) -> dict[str, Any]: ...
def loopback_ceiling(pairs: int, block_bytes: int, total_bytes: int, unix: bool = False) -> dict[str, float]: ...

# Per-key values of a batch: GET -> bytes received (int) or None for a miss; SET -> None;
# EXISTS/DELETE -> bool; a failed key -> its exception.
_KeyValue: TypeAlias = int | bool | None | BaseException

@final
class Page:
    @property
    def index(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def address(self) -> int: ...
    @property
    def data_ptr(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def memory_node(self) -> int | None: ...
    @property
    def valid(self) -> bool: ...
    @property
    def byte_array(self) -> memoryview: ...
    def __len__(self) -> int: ...
    if sys.version_info >= (3, 12):
        def __buffer__(self, flags: int, /) -> memoryview: ...
        def __release_buffer__(self, buffer: memoryview, /) -> None: ...
    def write_bytes(self, data: Buffer, offset: int = 0) -> None: ...
    def numpy(self, dtype: Any = None, shape: Any = None) -> Any: ...
    def torch(self, dtype: Any = None, shape: Any = None) -> Any: ...

@final
class PagedStore:
    def __new__(
        cls,
        host: str | None,
        port: int,
        *,
        page_size: int,
        num_pages: int,
        unix_path: str | None = None,
        username: str | None = None,
        password: str | None = None,
        db: int = 0,
        timeout: float = 10.0,
        connect_timeout: float | None = None,
        num_workers: int = 8,
        connections_per_worker: int = 1,
        max_inflight_bytes: int | None = None,
        max_inflight_requests: int | None = None,
        cpu_affinity: str | None = None,
        capacity_bytes: int = 0,
        eviction_policy: str = "lru",
        trigger_watermark: float = 0.8,
        eviction_ratio: float = 0.2,
    ) -> PagedStore: ...
    def allocate(self) -> Page | None: ...
    def allocate_many(self, n: int) -> list[Page]: ...
    def free(self, page: Page) -> None: ...
    def run(
        self,
        op: str,
        keys: Iterable[str | bytes],
        pages: Iterable[Page] | None = None,
        lengths: Sequence[int] | None = None,
    ) -> list[_KeyValue]: ...
    def submit(
        self,
        op: str,
        keys: Iterable[str | bytes],
        pages: Iterable[Page] | None = None,
        lengths: Sequence[int] | None = None,
    ) -> int: ...
    def drain(self) -> list[tuple[int, str, list[_KeyValue]]]: ...
    def drain_completions(self) -> list[tuple[int, bool, str, list[bool] | None]]: ...
    def event_fd(self) -> int: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def page_size(self) -> int: ...
    @property
    def num_pages(self) -> int: ...
    @property
    def free_pages(self) -> int: ...
    @property
    def num_workers(self) -> int: ...
    @property
    def arena_fd(self) -> int: ...
    @property
    def arena_name(self) -> str: ...
    @property
    def arena_size(self) -> int: ...
    @property
    def endpoint(self) -> str: ...
    @property
    def placement(self) -> dict[str, Any]: ...
    @property
    def worker_threads(self) -> list[tuple[int, int | None]]: ...
    @property
    def capacity_stats(self) -> dict[str, Any] | None: ...

@final
class Connector:
    def __new__(
        cls,
        host: str | None,
        port: int,
        *,
        unix_path: str | None = None,
        username: str | None = None,
        password: str | None = None,
        db: int = 0,
        timeout: float = 10.0,
        connect_timeout: float | None = None,
        num_workers: int = 8,
        connections_per_worker: int = 1,
        max_inflight_bytes: int | None = None,
        max_inflight_requests: int | None = None,
        cpu_affinity: str | None = None,
        capacity_bytes: int = 0,
        eviction_policy: str = "lru",
        trigger_watermark: float = 0.8,
        eviction_ratio: float = 0.2,
    ) -> Connector: ...
    def submit(self, op: str, keys: Iterable[str | bytes], buffers: Iterable[Buffer] | None = None) -> int: ...
    def drain_completions(self) -> list[tuple[int, bool, str, list[bool] | None]]: ...
    def drain(self) -> list[tuple[int, str, list[_KeyValue]]]: ...
    def event_fd(self) -> int: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def num_workers(self) -> int: ...
    @property
    def endpoint(self) -> str: ...
    @property
    def placement(self) -> dict[str, Any]: ...
    @property
    def worker_threads(self) -> list[tuple[int, int | None]]: ...
    @property
    def capacity_stats(self) -> dict[str, Any] | None: ...
