"""Where SGLang's host KV pool keeps each page: its buffers (registered with the engine once)
and, per page, the ranges (segments) SGLang's own zero-copy backends move.

The segments are learnt from the pool itself, once: ``get_page_buffer_meta`` (the method
SGLang's Mooncake, SiMM and EIC backends call on every batch) is asked for three pages (the
first two and the last), which gives each segment's offset in its buffer, its length and its
stride from one page to the next; the last page checks that the stride holds across the pool.
Every layout SGLang has (``layer_first``, ``page_first``, ``page_first_direct``,
``page_head``; MHA with K and V, MLA with one latent buffer, MLA's split K/V/indexer buffers)
is such a set of strided segments, so a batch's ranges are then one vectorised expression over
its pages: no Python loop per page, no pointer of SGLang's crossing into the engine.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lmcache_resp.errors import InvalidInputError

__all__ = ["PoolLayout", "Segment"]

# The buffers a host pool may keep pages in, largest first: SGLang's MHA pool's K and V are
# views of its one kv_buffer, so a segment is filed under the buffer that holds all of them.
_BUFFER_NAMES = ("kv_buffer", "k_buffer", "v_buffer", "index_k_buffer", "index_k_scale_buffer")
# What else shapes a page, as SGLang 0.5.23's host pools carry it (pool_host/mha.py, mla.py,
# base.py): two pools whose pages have the same byte lengths but another head geometry, layer
# range or latent split hold bytes that read differently, so each that the pool has goes into
# the keys' namespace.
_GEOMETRY = (
    "layer_num", "target_layer_num", "start_layer", "end_layer",  # every pool
    "head_num", "head_dim", "v_head_dim", "head_group_num",  # MHA
    "kv_lora_rank", "qk_rope_head_dim", "kv_cache_dim", "dsa_kv_cache_store_fp8",  # MLA
)


@dataclass(frozen=True)
class Segment:
    """One range of every page: in buffer ``buffer``, page ``p``'s bytes are
    ``[base + p * stride, base + p * stride + length)``."""

    buffer: int
    base: int
    stride: int
    length: int


@dataclass(frozen=True)
class PoolLayout:
    """A host pool's pages as segments of its buffers (see the module docs)."""

    page_tokens: int
    num_pages: int
    #: The pool's buffers as flat, writable uint8 numpy arrays over the pool's own memory.
    buffers: tuple[Any, ...]
    segments: tuple[Segment, ...]
    #: Per segment, what its key ends with: ``k``/``v`` for MHA's two, ``kv`` for MLA's one,
    #: the segment's index otherwise (layer_first has one per layer and component).
    names: tuple[str, ...]
    #: The pool's layout and dtype, as SGLang names them.
    layout: str
    dtype: str
    #: What else shapes a page (``_GEOMETRY``), as far as the pool has it.
    geometry: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, pool: Any, *, is_mla: bool) -> PoolLayout:
        """The layout of SGLang's host pool ``pool`` (a ``HostKVCache``: ``page_size``,
        ``size``, ``layout``, ``dtype``, its buffers and ``get_page_buffer_meta``)."""
        import numpy as np

        page_tokens, size = int(pool.page_size), int(pool.size)
        num_pages = size // page_tokens
        if num_pages < 2:
            raise InvalidInputError(f"the host pool holds {num_pages} page(s) of {page_tokens} tokens: need at least 2")
        if int(getattr(pool, "dcp_size", 1) or 1) > 1:
            raise InvalidInputError("decode context parallelism (DCP) pools are not supported: SGLang maps their pages")
        candidates = _buffers(pool)
        if not candidates:
            raise InvalidInputError(
                f"{type(pool).__name__} exposes no KV buffer ({', '.join(_BUFFER_NAMES)}): nothing to register"
            )
        probe = [0, 1, num_pages - 1]
        indices = np.concatenate([np.arange(p * page_tokens, (p + 1) * page_tokens) for p in probe])
        ptrs, sizes = pool.get_page_buffer_meta(_like(pool, indices))
        ptrs, sizes = _flat(ptrs), _flat(sizes)
        if not ptrs or len(ptrs) != len(sizes) or len(ptrs) % len(probe):
            raise InvalidInputError(
                f"{type(pool).__name__}.get_page_buffer_meta gave {len(ptrs)} pointers and {len(sizes)} sizes "
                f"for {len(probe)} pages"
            )
        per_page = len(ptrs) // len(probe)
        segments: list[Segment] = []
        used: list[int] = []
        for j in range(per_page):
            first, second, last = (ptrs[k * per_page + j] for k in range(3))
            length = sizes[j]
            if any(sizes[k * per_page + j] != length for k in range(3)) or length <= 0:
                raise InvalidInputError(f"segment {j} of the host pool's pages differs in length from page to page")
            stride = second - first
            if last != first + (num_pages - 1) * stride:
                raise InvalidInputError(
                    f"segment {j} of the host pool's pages is not evenly strided (page 1 at {stride} bytes from page 0, "
                    f"the last page elsewhere): unsupported layout {getattr(pool, 'layout', '?')!r}"
                )
            low, high = min(first, last), max(first, last) + length
            holder = next((i for i, (address, nbytes, _) in enumerate(candidates) if address <= low and high <= address + nbytes), None)
            if holder is None:
                raise InvalidInputError(f"segment {j} of the host pool's pages lies outside its buffers")
            if holder not in used:
                used.append(holder)
            segments.append(Segment(used.index(holder), first - candidates[holder][0], stride, length))
        buffers = tuple(candidates[i][2] for i in used)
        return cls(
            page_tokens=page_tokens,
            num_pages=num_pages,
            buffers=buffers,
            segments=tuple(segments),
            names=_names(per_page, is_mla),
            layout=str(getattr(pool, "layout", "")),
            dtype=str(getattr(pool, "dtype", "")).removeprefix("torch."),
            geometry=_geometry(pool),
        )

    @property
    def page_bytes(self) -> int:
        """Bytes of one page, all segments."""
        return sum(s.length for s in self.segments)

    def pages_of(self, host_indices: Any) -> Any:
        """The page numbers of a batch: ``host_indices`` holds ``page_tokens`` token slots per
        page, as SGLang's paged host allocator hands them to ``batch_get_v1``/``batch_set_v1``:
        each page's slots whole and in order (``p * page_tokens`` up to ``(p + 1) * page_tokens
        - 1``), integers, inside the pool. Anything else is refused, whichever slot is off: the
        engine moves whole pages, so a batch that named one slot elsewhere would move bytes the
        caller did not name."""
        import numpy as np

        indices = _integer_array(host_indices)
        if indices.ndim != 1 or len(indices) % self.page_tokens:
            raise InvalidInputError(
                f"host_indices must hold {self.page_tokens} token slots per page, got shape {tuple(indices.shape)}"
            )
        slots = indices.astype(np.int64, copy=False).reshape(-1, self.page_tokens)
        starts = slots[:, 0]
        limit = self.num_pages * self.page_tokens
        if len(starts) and (
            bool((starts % self.page_tokens).any()) or int(starts.min()) < 0 or int(starts.max()) >= limit
        ):
            raise InvalidInputError(
                f"host_indices must start whole pages of the pool (multiples of {self.page_tokens} below {limit})"
            )
        off = np.flatnonzero((slots != starts[:, None] + np.arange(self.page_tokens)).any(axis=1))
        if len(off):
            page = int(off[0])
            raise InvalidInputError(
                f"host_indices must hold each page's {self.page_tokens} slots in order: the slots of entry {page} "
                f"(from {int(starts[page])}) are not {int(starts[page])}..{int(starts[page]) + self.page_tokens - 1}"
            )
        return starts // self.page_tokens

    def spans(self, pages: Any, segments: Sequence[int]) -> Any:
        """The ``(offset, length)`` of ``segments`` (indices into :attr:`segments`, all in one
        buffer) of every page in ``pages``, page by page: a C-contiguous ``(n * len(segments), 2)``
        uint64 array, what the engine reads (no Python object per page)."""
        import numpy as np

        chosen = [self.segments[j] for j in segments]
        base = np.array([s.base for s in chosen], dtype=np.int64)
        stride = np.array([s.stride for s in chosen], dtype=np.int64)
        length = np.array([s.length for s in chosen], dtype=np.uint64)
        out = np.empty((len(pages), len(chosen), 2), dtype=np.uint64)
        out[:, :, 0] = base + np.asarray(pages, dtype=np.int64)[:, None] * stride
        out[:, :, 1] = length
        return out.reshape(-1, 2)

    def by_buffer(self) -> list[tuple[int, list[int]]]:
        """The segments grouped by the buffer they lie in: a batch names one registered region."""
        groups: dict[int, list[int]] = {}
        for j, segment in enumerate(self.segments):
            groups.setdefault(segment.buffer, []).append(j)
        return sorted(groups.items())

    def identity(self) -> dict[str, Any]:
        """What decides how a page's bytes read: two pools with different identities never
        exchange pages (the namespace digest covers it)."""
        return {
            "layout": self.layout,
            "dtype": self.dtype,
            "page_tokens": self.page_tokens,
            "segments": [s.length for s in self.segments],
            "names": list(self.names),
            "geometry": dict(self.geometry),
        }


def namespace_digest(identity: dict[str, Any]) -> str:
    """16 hex digits of SHA-256 over ``identity`` as canonical JSON."""
    encoded = json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()[:16]


def _geometry(pool: Any) -> tuple[tuple[str, Any], ...]:
    """Each ``_GEOMETRY`` attribute the pool has, as plain JSON values."""
    found: list[tuple[str, Any]] = []
    for name in _GEOMETRY:
        value = getattr(pool, name, None)
        if value is None:
            continue
        if isinstance(value, bool):
            found.append((name, value))
        elif hasattr(value, "__index__"):
            found.append((name, int(value)))
        else:
            found.append((name, str(value)))
    return tuple(found)


def _integer_array(host_indices: Any) -> Any:
    """``host_indices`` (a CPU torch tensor, a numpy array or a sequence) as a numpy array of
    integers; InvalidInputError for anything else (floats are refused, never truncated)."""
    import numpy as np

    try:
        indices = host_indices.numpy() if hasattr(host_indices, "numpy") else np.asarray(host_indices)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise InvalidInputError(
            f"host_indices must be integer token slots (a CPU tensor or array of int64), not {type(host_indices).__name__}: "
            f"{exc}"
        ) from None
    if indices.dtype.kind not in "iu":
        raise InvalidInputError(
            f"host_indices must be integer token slots (int64, as SGLang's host allocator gives them), not {indices.dtype}"
        )
    return indices


def _names(per_page: int, is_mla: bool) -> tuple[str, ...]:
    if is_mla and per_page == 1:
        return ("kv",)
    if not is_mla and per_page == 2:
        return ("k", "v")
    return tuple(str(j) for j in range(per_page))


def _buffers(pool: Any) -> list[tuple[int, int, Any]]:
    """``(address, bytes, flat uint8 numpy view)`` of each distinct buffer of ``pool``, largest
    first."""
    found: dict[tuple[int, int], Any] = {}
    for name in _BUFFER_NAMES:
        buffer = getattr(pool, name, None)
        if buffer is None or isinstance(buffer, (list, tuple)):
            continue
        view = _byte_view(buffer)
        if view is not None:
            found.setdefault((int(view.ctypes.data), int(view.nbytes)), view)
    return sorted(((a, n, v) for (a, n), v in found.items()), key=lambda entry: -entry[1])


def _byte_view(buffer: Any) -> Any:
    """A flat uint8 numpy array over ``buffer``'s memory (a CPU torch tensor or a numpy array),
    or None for one that is not contiguous host memory."""
    import numpy as np

    if isinstance(buffer, np.ndarray):
        return buffer.reshape(-1).view(np.uint8) if buffer.flags.c_contiguous else None
    if not hasattr(buffer, "data_ptr") or getattr(buffer, "device", None) is None:
        return None
    if buffer.device.type != "cpu" or not buffer.is_contiguous():
        return None
    torch = importlib.import_module("torch")
    return buffer.detach().reshape(-1).view(torch.uint8).numpy()


def _like(pool: Any, indices: Any) -> Any:
    """``indices`` as the pool's own index type: a torch tensor for SGLang's pools."""
    buffer = getattr(pool, "kv_buffer", None)
    if buffer is not None and hasattr(buffer, "data_ptr"):
        return importlib.import_module("torch").from_numpy(indices)
    return indices


def _flat(values: Any) -> list[int]:
    """SGLang returns one list per batch, or (MLA's multi-buffer pages) one list per page."""
    out: list[int] = []
    for value in values:
        if isinstance(value, (list, tuple)):
            out.extend(int(v) for v in value)
        else:
            out.append(int(value))
    return out
