"""The model the vLLM runs serve (--vllm-ttft and vllm-tests/): a small Llama whose config the
package ships (vllm_llama.json: 8 layers, hidden 1024, 16 heads, 4 KV heads of 64, vocab 32000),
with seeded random weights written next to it at run time.

Why not vLLM's ``load_format="dummy"``: its weights are so small that the output does not depend
on the KV cache at all (rotating the KV values among the keys left the tokens unchanged), so
"tokens identical" would prove nothing. Weights here are N(0, 0.02), norms 1: under them a
negated KV changes the output (vllm-tests checks that control on every run).

Needs torch and safetensors (vLLM's environment); imported only by what runs there.
"""

from __future__ import annotations

import importlib
import json
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["BLOCK_TOKENS", "CHUNK_TOKENS", "DTYPE_BYTES", "config", "chunk_bytes", "write_model"]

# vLLM's block size and LMCache's --chunk-size for these runs.
BLOCK_TOKENS = 64
CHUNK_TOKENS = 256
DTYPE_BYTES = 2  # bfloat16
WEIGHT_STD = 0.02
CONFIG_NAME = "vllm_llama.json"


def config() -> dict[str, Any]:
    """The shipped config.json of the model."""
    loaded: dict[str, Any] = json.loads(resources.files("lmcache_resp.bench").joinpath(CONFIG_NAME).read_text())
    return loaded


def chunk_bytes(tokens: int = CHUNK_TOKENS) -> int:
    """Bytes of KV for ``tokens`` tokens across every layer (K and V): one LMCache chunk's value."""
    c = config()
    return int(tokens * c["num_hidden_layers"] * 2 * c["num_key_value_heads"] * c["head_dim"] * DTYPE_BYTES)


def _shapes(c: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    hidden, inter, vocab = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    q = c["num_attention_heads"] * c["head_dim"]
    kv = c["num_key_value_heads"] * c["head_dim"]
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,),
                                          "lm_head.weight": (vocab, hidden)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "self_attn.q_proj.weight": (q, hidden), p + "self_attn.k_proj.weight": (kv, hidden),
            p + "self_attn.v_proj.weight": (kv, hidden), p + "self_attn.o_proj.weight": (hidden, q),
            p + "mlp.gate_proj.weight": (inter, hidden), p + "mlp.up_proj.weight": (inter, hidden),
            p + "mlp.down_proj.weight": (hidden, inter),
            p + "input_layernorm.weight": (hidden,), p + "post_attention_layernorm.weight": (hidden,),
        })
    return shapes


def write_model(directory: Path, seed: int = 0) -> Path:
    """Writes config.json and model.safetensors (bf16; N(0, 0.02) from ``seed``, norms 1) into
    ``directory``; returns it. Written again only when the seed or the config changed."""
    # Imported by name: only vLLM's environment has them (mypy checks the package without them).
    torch = importlib.import_module("torch")
    save_file = importlib.import_module("safetensors.torch").save_file

    c = config()
    directory.mkdir(parents=True, exist_ok=True)
    stamp = directory / "weights.seed"
    wanted = json.dumps({"seed": seed, "std": WEIGHT_STD, "config": c}, sort_keys=True)
    if stamp.exists() and stamp.read_text() == wanted and (directory / "model.safetensors").exists():
        return directory
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape in sorted(_shapes(c).items()):
        if name.endswith("norm.weight"):
            tensors[name] = torch.ones(shape, dtype=torch.bfloat16)
        else:
            tensors[name] = (torch.randn(shape, generator=generator) * WEIGHT_STD).to(torch.bfloat16)
    (directory / "config.json").write_text(json.dumps(c, indent=2))
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    stamp.write_text(wanted)
    return directory
