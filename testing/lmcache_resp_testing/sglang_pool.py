"""A host KV pool laid out as SGLang lays out its own, for the suites that run without SGLang.

SGLang's ``MHATokenToKVPoolHost`` and ``MLATokenToKVPoolHost`` (sglang 0.5.23,
``python/sglang/srt/mem_cache/pool_host/mha.py`` and ``mla.py``) keep every page in one
``kv_buffer`` tensor whose shape depends on ``--hicache-mem-layout``, and answer
``get_page_buffer_meta(indices)`` with the address and length of each range of each page, in
the order their zero-copy backends store them. This class has the same shapes (numpy arrays
instead of torch tensors) and the same ``get_page_buffer_meta`` formulas, transcribed from those
files. scripts/test-sglang.sh runs the same adapter against SGLang's own classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["SGLangLikeConfig", "SGLangLikePool"]

LAYOUTS = ("layer_first", "page_first", "page_first_direct")


@dataclass
class SGLangLikeConfig:
    """The fields of SGLang's ``HiCacheStorageConfig`` the backend reads."""

    extra_config: dict[str, Any] = field(default_factory=dict)
    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    attn_cp_rank: int = 0
    attn_cp_size: int = 1
    is_mla_model: bool = False
    model_name: str | None = "meta-llama/Llama-3.1-8B-Instruct"


class SGLangLikePool:
    """``page_num`` pages of ``page_size`` tokens, MHA (K and V of ``head_num`` heads of
    ``head_dim``) or MLA (one latent row of ``kv_lora_rank + qk_rope_head_dim``), bf16-sized
    (2-byte) elements. The attributes that shape a page are those SGLang's pools carry:
    ``layer_num``, ``start_layer``/``end_layer``, and ``head_num``/``head_dim``/``v_head_dim``
    (MHA) or ``kv_lora_rank``/``qk_rope_head_dim``/``kv_cache_dim`` (MLA)."""

    def __init__(
        self,
        layout: str,
        *,
        page_num: int = 8,
        page_size: int = 4,
        layer_num: int = 3,
        head_num: int = 2,
        head_dim: int = 8,
        mla: bool = False,
        kv_lora_rank: int = 16,
        qk_rope_head_dim: int = 8,
        seed: int = 0,
    ) -> None:
        assert layout in LAYOUTS, layout
        self.layout, self.page_size, self.layer_num, self.mla = layout, page_size, layer_num, mla
        self.start_layer, self.end_layer = 0, layer_num - 1
        if mla:
            self.kv_lora_rank, self.qk_rope_head_dim = kv_lora_rank, qk_rope_head_dim
            self.kv_cache_dim = kv_lora_rank + qk_rope_head_dim
        else:
            self.head_num, self.head_dim, self.v_head_dim = head_num, head_dim, head_dim
        self.page_num, self.size = page_num, page_num * page_size
        self.dtype = "torch.bfloat16"
        self.itemsize = 2
        if mla:
            dim = self.kv_cache_dim
            dims = {
                "layer_first": (layer_num, self.size, 1, dim),
                "page_first": (self.size, layer_num, 1, dim),
                "page_first_direct": (page_num, layer_num, page_size, 1, dim),
            }[layout]
        else:
            dims = {
                "layer_first": (2, layer_num, self.size, head_num, head_dim),
                "page_first": (2, self.size, layer_num, head_num, head_dim),
                "page_first_direct": (2, page_num, layer_num, page_size, head_num, head_dim),
            }[layout]
        rng = np.random.default_rng(seed)
        self.kv_buffer = rng.integers(0, 1 << 16, size=dims, dtype=np.uint16)

    def get_page_buffer_meta(self, indices: Any) -> tuple[list[int], list[int]]:
        indices = list(indices)
        assert len(indices) % self.page_size == 0
        base, item = int(self.kv_buffer.ctypes.data), self.itemsize
        starts = indices[:: self.page_size]
        if self.mla:
            dim = self.kv_cache_dim
            if self.layout == "layer_first":
                ptrs = [base + s * dim * item + layer * self.size * dim * item for s in starts for layer in range(self.layer_num)]
                return ptrs, [item * self.page_size * dim] * len(ptrs)
            ptrs = [base + s * self.layer_num * dim * item for s in starts]
            return ptrs, [self.layer_num * item * self.page_size * dim] * len(ptrs)
        row = self.head_num * self.head_dim * item
        v_offset = self.layer_num * self.size * row
        ptrs = []
        if self.layout == "layer_first":
            for s in starts:
                for layer in range(self.layer_num):
                    k = base + s * row + layer * self.size * row
                    ptrs += [k, k + v_offset]
            return ptrs, [item * self.page_size * self.head_num * self.head_dim] * len(ptrs)
        for s in starts:
            k = base + s * self.layer_num * row
            ptrs += [k, k + v_offset]
        return ptrs, [self.layer_num * self.page_size * row] * len(ptrs)

    def segments(self, page: int) -> list[bytes]:
        """Each range of ``page`` (what each of its keys holds)."""
        raw = self.kv_buffer.reshape(-1).view(np.uint8)
        base = int(self.kv_buffer.ctypes.data)
        ptrs, sizes = self.get_page_buffer_meta(range(page * self.page_size, (page + 1) * self.page_size))
        return [raw[p - base : p - base + n].tobytes() for p, n in zip(ptrs, sizes)]

    def host_indices(self, pages: list[int]) -> Any:
        """Token slots of ``pages``, as SGLang's allocator hands them to a batch."""
        return np.concatenate([np.arange(p * self.page_size, (p + 1) * self.page_size) for p in pages])
