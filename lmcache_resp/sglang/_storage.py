"""The storage backend itself, without SGLang's base class (``lmcache_resp.sglang`` adds it when
SGLang loads the class): what ``RespHiCacheStorage`` does, testable without SGLang installed.

Keys. A page is stored as one value per segment of the host pool's layout (see ``_layout``):
``sgl:<namespace>:<page hash>:<segment>``, where the segment is ``k``/``v`` for an MHA pool
laid out page-first (K and V of all layers, one range each), ``kv`` for an MLA pool, and the
segment's index for the layouts that split a page further (``layer_first``: one range per
layer and component). The namespace is 16 hex digits of SHA-256 over what decides how the
bytes read: the model, the layout, dtype, page size and segment lengths, every dimension of
the pool that shapes a page (layers, heads, head dims, MLA's latent split: ``_layout``), and
the shard the rank holds (TP rank and size for MHA, whose ranks hold different heads; none for
MLA, whose ranks hold the same latent cache; PP stage, attention-CP rank where they are > 1).
Different models, geometries, TP ranks or layouts never meet on one key; identical deployments
share their pages. ``key_prefix`` (ours) puts everything under ``<key_prefix>@`` as well.

Nothing raises into SGLang's threads from a batch: a batch that cannot run (the backend closed,
keys that are not strings, host indices that are not whole pages of the pool) is all False (or
0 pages for ``batch_exists``) with a warning saying why. Only ``keys`` that are not a list at
all raise (``TypeError``): there is no page to answer False for.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from lmcache_resp import _native, metrics
from lmcache_resp._front import EngineFront
from lmcache_resp._placement import log_placement
from lmcache_resp.errors import ClosedError, InvalidInputError, RespError
from lmcache_resp.settings import RespSettings
from lmcache_resp.sglang._layout import PoolLayout, namespace_digest

__all__ = ["RespHiCacheStorageImpl"]

logger = logging.getLogger("lmcache_resp")

#: SGLang's extra-config key that selects the zero-copy interface for a dynamic backend.
INTERFACE_V1 = "interface_v1"
#: Ours beside the connection settings: SET only the segments not stored yet (as SGLang's file
#: and Mooncake backends do), checked with one pipelined EXISTS per batch.
SKIP_EXISTING = "skip_existing"
#: The identity the namespace digest covers changed shape: 2 added the pool's geometry (#42).
NAMESPACE_FORMAT = 2


class RespHiCacheStorageImpl(EngineFront[_native.Connector]):
    """SGLang HiCache's L3 storage on Redis/Valkey; SGLang builds it as
    ``RespHiCacheStorage(storage_config, kwargs)`` (its ``dynamic`` backend loader).

    ``storage_config`` is SGLang's ``HiCacheStorageConfig``: its ``extra_config`` (the JSON of
    ``--hicache-storage-backend-extra-config``) carries our settings beside SGLang's own keys
    (see :meth:`RespSettings.from_sglang <lmcache_resp.settings.RespSettings.from_sglang>`),
    and must set ``"interface_v1": 1``: pages move through SGLang's zero-copy
    ``batch_get_v1``/``batch_set_v1``, straight between the host pool and the socket.
    """

    def __init__(self, storage_config: Any, kwargs: Mapping[str, Any] | None = None) -> None:
        extra = dict(getattr(storage_config, "extra_config", None) or {})
        if not extra.get(INTERFACE_V1):
            raise InvalidInputError(
                'RespHiCacheStorage moves pages through SGLang\'s zero-copy interface: add "interface_v1": 1 to '
                "--hicache-storage-backend-extra-config (docs/sglang.md has the whole command)"
            )
        skip = extra.pop(SKIP_EXISTING, True)
        if not isinstance(skip, bool):
            raise InvalidInputError(f"{SKIP_EXISTING} must be true or false, got {skip!r}")
        self._skip_existing = skip
        self._config = storage_config
        self._settings = RespSettings.from_sglang(extra)
        logger.info("RespHiCacheStorage: settings %s", self._settings.to_dict())
        self._native = _native.Connector(self._settings)
        metrics.track(self)
        log_placement("RespHiCacheStorage", self._native.placement)
        self._layout: PoolLayout | None = None
        self._regions: list[int] = []
        self._prefix = b""
        self._suffixes: list[bytes] = []

    # -- the host pool -----------------------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Registers the host pool's buffers with the engine, once; learns where each page's
        segments lie (``_layout``) and the keys' namespace. A pool that is refused (or whose
        registration fails) changes nothing: the pool registered before stays, whole."""
        config = self._config
        layout = PoolLayout.of(mem_pool_host, is_mla=bool(getattr(config, "is_mla_model", False)))
        identity = {"format": NAMESPACE_FORMAT, "model": getattr(config, "model_name", None) or "",
                    **layout.identity(), **_shard(config)}
        namespace = namespace_digest(identity)
        regions: list[int] = []
        try:
            for buffer in layout.buffers:
                regions.append(self._native.register_region(buffer))
            self._unregister(list(self._regions))  # refused while a batch in flight names one
        except BaseException:
            self._unregister(regions)
            raise
        self.mem_pool_host = mem_pool_host
        self._regions = regions
        self._layout = layout
        self._prefix = f"sgl:{namespace}:".encode()
        self._suffixes = [f":{name}".encode() for name in layout.names]
        logger.info(
            "RespHiCacheStorage: %d pages of %d tokens, %d segment(s) per page (%d bytes), keys sgl:%s:<hash>:{%s} "
            "for %s",
            layout.num_pages, layout.page_tokens, len(layout.segments), layout.page_bytes, namespace,
            ",".join(layout.names), identity,
        )

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        """SGLang's v2 interface registers each pool of a hybrid model: the KV pool is the one
        already registered; pools beside it (Mamba, SWA, DSA indexer states) are not supported."""
        if str(host_pool_name) == "kv" and host_pool is getattr(self, "mem_pool_host", None):
            return
        raise NotImplementedError(
            f"RespHiCacheStorage stores the KV pool only: the {host_pool_name!s} pool of this hybrid model "
            "(SGLang's v2 interface) is not supported"
        )

    # -- batches -----------------------------------------------------------------------------

    def batch_set_v1(self, keys: list[str], host_indices: Any, extra_info: Any = None) -> list[bool]:
        """Stores each page (all its segments) from the host pool; True per page stored or
        already there. A key given twice is stored once, from its first page (SGLang's keys
        hash the whole prefix: two pages under one key hold the same tokens' KV), and every
        place it appears answers as that one did."""
        if not _page_keys(keys):
            return []
        try:
            layout = self._usable("batch_set_v1", keys)
            pages = layout.pages_of(host_indices)
            self._check_count(keys, pages)
            first = dict.fromkeys(keys)  # each key once, in order of first appearance
            if len(first) < len(keys):
                where = {key: i for i, key in reversed(list(enumerate(keys)))}
                unique = list(first)
                stored = self._set(unique, pages[[where[key] for key in unique]])
                done = dict(zip(unique, stored))
                return [done[key] for key in keys]
            return self._set(keys, pages)
        except RespError as exc:
            return self._failed("batch_set_v1", keys, exc)

    def batch_get_v1(self, keys: list[str], host_indices: Any, extra_info: Any = None) -> list[bool]:
        """Reads each page (all its segments) into the host pool; True per page read whole. A
        miss is False (the page's slots hold whatever the segments that did arrive wrote). A key
        may be read into several pages; a page may be named once."""
        if not _page_keys(keys):
            return []
        try:
            import numpy as np

            layout = self._usable("batch_get_v1", keys)
            pages = layout.pages_of(host_indices)
            self._check_count(keys, pages)
            if len(np.unique(pages)) < len(pages):
                raise InvalidInputError("host_indices name one page twice: two values would be read into it at once")
            return self._move("get", keys, pages)
        except RespError as exc:
            return self._failed("batch_get_v1", keys, exc)

    def batch_exists(self, keys: list[str], extra_info: Any = None) -> int:
        """How many of ``keys``, from the first, are stored whole (every segment): one
        pipelined EXISTS per segment, one round trip. A server that is down answers 0 at once."""
        if not _page_keys(keys):
            return 0
        try:
            import numpy as np

            self._usable("batch_exists", keys)
            whole = self._segments_present(keys).all(axis=1)
            return int(np.argmin(whole)) if not whole.all() else len(keys)
        except RespError as exc:
            self._failed("batch_exists", keys, exc)
            return 0

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    # SGLang's older, copying interface: the controller uses it only without "interface_v1".
    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        raise NotImplementedError(_V1_ONLY)

    def batch_get(self, keys: list[str], target_locations: Any = None, target_sizes: Any = None) -> Any:
        raise NotImplementedError(_V1_ONLY)

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        raise NotImplementedError(_V1_ONLY)

    def batch_set(self, keys: list[str], values: Any = None, target_locations: Any = None, target_sizes: Any = None) -> bool:
        raise NotImplementedError(_V1_ONLY)

    def delete_pages(self, keys: list[str]) -> list[bool]:
        """Deletes the pages' segments; True per page whose segments all existed (a key given
        twice is deleted once, and answers as that once did)."""
        if not _page_keys(keys):
            return []
        try:
            import numpy as np

            self._usable("delete_pages", keys)
            unique = list(dict.fromkeys(keys))
            result = self._native.run_ranges("delete", 0, unique, None, self._suffixes, self._prefix)
            result.check("delete_pages")
            done = dict(zip(unique, _whole_rows(np.asarray(result.hits, dtype=bool).reshape(len(unique), -1))))
            return [done[key] for key in keys]
        except RespError as exc:
            return self._failed("delete_pages", keys, exc)

    # -- lifecycle and facts -----------------------------------------------------------------

    def close(self) -> None:
        """Completes or fails everything in flight, then lets go of the host pool's buffers
        (their registrations); idempotent. Every batch after it is False (0 pages) with a
        warning."""
        self._native.close()
        # The ids stay: a batch racing close() is refused by the closed connector, never
        # handed an index that is gone.
        self._unregister(list(self._regions), quietly=True)

    @property
    def settings(self) -> RespSettings:
        return self._settings

    @property
    def layout(self) -> PoolLayout | None:
        """The registered host pool's layout, once registered."""
        return self._layout

    @property
    def key_prefix(self) -> str:
        """``sgl:<namespace>:``, what every page key starts with (after ``key_prefix@``)."""
        return self._prefix.decode()

    def __repr__(self) -> str:
        state = ", closed" if self._native.closed else ""
        return f"RespHiCacheStorage({self._native.endpoint!r}{state})"

    # -- inside --------------------------------------------------------------------------------

    def _set(self, keys: list[str], pages: Any) -> list[bool]:
        """SET the pages of distinct ``keys`` (only their missing segments with skip_existing)."""
        present = self._segments_present(keys) if self._skip_existing else None
        return self._move("set", keys, pages, skip=present)

    def _move(self, op: str, keys: list[str], pages: Any, skip: Any = None) -> list[bool]:
        """GET or SET every segment of every page, one batch per buffer; True per page whose
        segments all moved (or, with ``skip``, were there already)."""
        import numpy as np

        layout = self._require_layout()
        done = np.ones((len(keys), len(layout.segments)), dtype=bool)
        for buffer, segments in layout.by_buffer():
            suffixes = [self._suffixes[j] for j in segments]
            spans = layout.spans(pages, segments)
            if skip is None:
                result = self._native.run_ranges(op, self._regions[buffer], keys, spans, suffixes, self._prefix)
                done[:, segments] = np.asarray(result.hits, dtype=bool).reshape(len(keys), len(segments))
                continue
            todo = ~skip[:, segments]
            if not todo.any():
                continue
            # Pages with a missing segment are sent whole: their other segments may be stale.
            rows = np.flatnonzero(todo.any(axis=1))
            picked = [keys[i] for i in rows] if len(rows) < len(keys) else keys
            result = self._native.run_ranges(op, self._regions[buffer], picked, spans.reshape(len(keys), len(segments), 2)[rows].reshape(-1, 2), suffixes, self._prefix)
            done[np.ix_(rows, np.asarray(segments))] = np.asarray(result.hits, dtype=bool).reshape(len(rows), len(segments))
        return _whole_rows(done)

    def _segments_present(self, keys: list[str]) -> Any:
        """Per page and segment, whether the key exists (failed keys count as absent)."""
        import numpy as np

        self._require_layout()
        result = self._native.run_ranges("exists", 0, keys, None, self._suffixes, self._prefix)
        return np.asarray(result.hits, dtype=bool).reshape(len(keys), len(self._suffixes))

    def _require_layout(self) -> PoolLayout:
        if self._layout is None:
            raise InvalidInputError("no host pool registered: SGLang calls register_mem_pool_host first")
        return self._layout

    def _usable(self, call: str, keys: list[str]) -> PoolLayout:
        """The layout, once the backend is open, a pool registered and every key a string."""
        if self._native.closed:
            raise ClosedError(f"RespHiCacheStorage is closed: {call} after close() moves nothing")
        bad = next((i for i, key in enumerate(keys) if not isinstance(key, str)), None)
        if bad is not None:
            raise InvalidInputError(
                f"keys must be strings (SGLang's page hashes): key {bad} is a {type(keys[bad]).__name__}"
            )
        return self._require_layout()

    @staticmethod
    def _check_count(keys: list[str], pages: Any) -> None:
        if len(keys) != len(pages):
            raise InvalidInputError(f"{len(keys)} keys but {len(pages)} pages in host_indices")

    def _failed(self, call: str, keys: list[str], exc: RespError) -> list[bool]:
        """A batch that could not run at all (the connector closed, bad input): every page
        False, never an exception into SGLang's threads; logged."""
        logger.warning("RespHiCacheStorage.%s of %d page(s) failed: %s: %s", call, len(keys), type(exc).__name__, exc)
        return [False] * len(keys)

    def _unregister(self, regions: list[int], *, quietly: bool = False) -> None:
        """Lets go of ``regions`` (their buffers); quietly: those that cannot be (after close,
        or gone already) are left to the connector, which lets go of them when it is freed."""
        while regions:
            try:
                self._native.unregister_region(regions[-1])
            except RespError:
                if not quietly:
                    raise
            regions.pop()


_V1_ONLY = (
    "RespHiCacheStorage serves SGLang's zero-copy interface only (batch_get_v1/batch_set_v1): "
    'add "interface_v1": 1 to --hicache-storage-backend-extra-config'
)


def _page_keys(keys: Any) -> bool:
    """Whether the batch has keys; a TypeError for ``keys`` that is not a list of them (there is
    then no page to answer False for)."""
    if isinstance(keys, (str, bytes)) or not isinstance(keys, (list, tuple)):
        raise TypeError(f"keys must be a list of page hashes (str), not {type(keys).__name__}")
    return bool(keys)


def _whole_rows(table: Any) -> list[bool]:
    """Per row (page) of a bool table (page x segment): whether every entry is True."""
    import numpy as np

    whole: Any = np.asarray(table).all(axis=1)
    return [bool(x) for x in whole]


def _shard(config: Any) -> dict[str, Any]:
    """Which shard of the model's KV this rank holds: MHA ranks hold different heads (TP rank
    and size count); MLA ranks hold the same latent cache and share it."""
    shard: dict[str, Any] = {}
    if not getattr(config, "is_mla_model", False):
        shard["tp"] = [int(getattr(config, "tp_rank", 0)), int(getattr(config, "tp_size", 1))]
    if int(getattr(config, "pp_size", 1)) > 1:
        shard["pp"] = [int(config.pp_rank), int(config.pp_size)]
    if int(getattr(config, "attn_cp_size", 1)) > 1:
        shard["cp"] = [int(config.attn_cp_rank), int(config.attn_cp_size)]
    return shard
