"""Where the tier's rows live on the server: one key per primary row (vLLM chunk).

A key is ``vllm:<namespace>:<OffloadKey in hex>`` (after ``<key_prefix>@`` when ``key_prefix``
is set). ``OffloadKey`` is vLLM's block hash followed by the 4-byte KV cache group index. The
namespace is 16 hex digits of SHA-256 over vLLM's own fingerprint of the deployment, the one its
file tier names its directory with (``FileMapper.get_run_config()``: the model, tokens per hash,
blocks per chunk, TP/PP/PCP/DCP sizes, dtype, the KV cache groups with their layer names, and
whether the layout is parallelism-agnostic, replicated or canonical), its rank, and the row's
length in bytes. Two engines whose rows read differently never meet on a key; identical
deployments (with one ``PYTHONHASHSEED``, or vLLM's default seed) share their rows.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["KEY_FORMAT", "namespace_of"]

#: Changes when the bytes under a key change meaning for the same fingerprint.
KEY_FORMAT = 1


def namespace_of(file_mapper: Any, spec: Any, row_bytes: int) -> tuple[str, dict[str, Any]]:
    """``(namespace, identity)`` of an engine: ``spec`` is vLLM's ``OffloadingSpec``,
    ``file_mapper`` vLLM's ``FileMapper`` (built as the file tier builds it: one file per
    chunk, parallelism-agnostic where vLLM allows it)."""
    mapper = file_mapper.from_offloading_spec(
        root_dir="", offloading_spec=spec, blocks_per_file=spec.blocks_per_chunk, parallel_agnostic=True
    )
    identity = {"format": KEY_FORMAT, **mapper.get_run_config(), "rank": int(mapper.rank), "row_bytes": int(row_bytes)}
    encoded = json.dumps(identity, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(encoded).hexdigest()[:16], identity
