"""One vLLM engine, driven over JSON lines: ``python -m lmcache_resp.bench.vllm_engine SPEC``.

Run in vLLM's environment (scripts/test-vllm.sh's venv) by vllm_stack.Engine, one process per
engine life: a phase of --vllm-ttft or of vllm-tests starts one and ends it, so "the engine
restarted" is a new process. SPEC is a JSON object: ``model`` (a directory vllm_model wrote),
``lmcache_port`` (LMCache's MP server; null: no KV connector), ``max_model_len``, and optionally
``max_num_batched_tokens``, ``dtype``, ``seed``, ``prefix_caching``, ``kv_cache_bytes``.

The engine is vLLM's own ``LLMEngine`` (V1) with the engine core in its own process, as ``vllm
serve`` runs it, ``skip_tokenizer_init`` (prompts are token ids), ``enforce_eager`` (no
torch.compile: minutes on 2 cores), vLLM's own prefix cache off unless ``prefix_caching`` is
true (off, a warm prefix can only come from LMCache), and
``KVTransferConfig(kv_connector="LMCacheMPConnector")``, for which vLLM loads LMCache's own
connector class.

Once built it prints ``{"event": "ready", ...}``; then each line on stdin is a command and gets
one line back:

- ``{"op": "generate", "name": N, "prompt": [ids], "max_tokens": K, "logprobs": L}``: greedy;
  answers ``{"event": "result", "name", "ttft_s", "e2e_s", "tokens", "first_logprobs",
  "num_cached_tokens"}``. TTFT is from ``add_request`` to the ``step()`` that returns the first
  token, on this process's clock (what a caller of the engine waits).
- ``{"op": "quit"}``: shuts the engine down and exits 0.

An error is answered ``{"event": "error", "error": ...}`` and the process exits 1.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
from typing import Any

from lmcache_resp.bench.vllm_model import BLOCK_TOKENS

__all__ = ["KV_CACHE_BYTES", "engine_args", "main"]

# 512 MiB of KV cache: 64k tokens of the shipped model (8 KiB a token), well over a 16k prompt.
KV_CACHE_BYTES = 512 << 20

# What vLLM and LMCache need set before they are imported.
ENGINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "LMCACHE_TRACK_USAGE": "false",
    "LMCACHE_DISABLE_BANNER": "1",
}


def _vllm(module: str) -> Any:
    """A vLLM module, imported by name: only vLLM's environment has it (mypy checks the package
    without it)."""
    return importlib.import_module(module)


def engine_args(spec: dict[str, Any]) -> Any:
    KVTransferConfig = _vllm("vllm.config").KVTransferConfig
    EngineArgs = _vllm("vllm.engine.arg_utils").EngineArgs

    kv_transfer = None
    if spec.get("lmcache_port") is not None:
        kv_transfer = KVTransferConfig(
            kv_connector="LMCacheMPConnector", kv_role="kv_both",
            kv_connector_extra_config={"lmcache.mp.host": "tcp://127.0.0.1", "lmcache.mp.port": spec["lmcache_port"],
                                       "lmcache.mp.mq_timeout": spec.get("mq_timeout", 60.0)},
        )
    extra: dict[str, Any] = {}
    if spec.get("max_num_batched_tokens"):
        extra["max_num_batched_tokens"] = spec["max_num_batched_tokens"]
    return EngineArgs(
        model=spec["model"], skip_tokenizer_init=True, dtype=spec.get("dtype", "bfloat16"), block_size=BLOCK_TOKENS,
        max_model_len=spec["max_model_len"], enforce_eager=True,
        enable_prefix_caching=bool(spec.get("prefix_caching", False)),
        kv_transfer_config=kv_transfer, seed=spec.get("seed", 0), disable_log_stats=True,
        # On CPU the KV cache is host memory: a fixed size, not a share of the machine's memory
        # (vLLM's default wants 92% of it free at start).
        kv_cache_memory_bytes=int(spec.get("kv_cache_bytes", KV_CACHE_BYTES)), **extra,
    )


# The protocol's own stream: the original stdout. vLLM and LMCache log to stdout, so fd 1 is
# pointed at stderr (for this process and the engine core it starts) once main() begins.
_PROTOCOL: Any = None


def _say(message: dict[str, Any]) -> None:
    _PROTOCOL.write(json.dumps(message) + "\n")
    _PROTOCOL.flush()


def _generate(engine: Any, command: dict[str, Any], count: int) -> dict[str, Any]:
    params = _vllm("vllm").SamplingParams(temperature=0.0, max_tokens=int(command["max_tokens"]),
                            logprobs=int(command.get("logprobs", 5)), ignore_eos=True)
    request_id = f"{command['name']}-{count}"
    started = time.perf_counter()
    engine.add_request(request_id, {"prompt_token_ids": list(command["prompt"])}, params)
    first = None
    final = None
    while final is None:
        for output in engine.step():
            if output.request_id != request_id:
                continue
            if first is None and output.outputs and output.outputs[0].token_ids:
                first = time.perf_counter()
            if output.finished:
                final = output
    ended = time.perf_counter()
    completion = final.outputs[0]
    first_logprobs = {}
    if completion.logprobs:
        first_logprobs = {str(token): entry.logprob for token, entry in completion.logprobs[0].items()}
    return {
        "event": "result", "name": command["name"], "ttft_s": (first or ended) - started, "e2e_s": ended - started,
        "tokens": list(completion.token_ids), "first_logprobs": first_logprobs,
        "num_cached_tokens": final.num_cached_tokens, "prompt_tokens": len(command["prompt"]),
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m lmcache_resp.bench.vllm_engine SPEC_JSON", file=sys.stderr)
        return 2
    spec = json.loads(args[0])
    global _PROTOCOL
    sys.stdout.flush()
    _PROTOCOL = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    for name, value in ENGINE_ENV.items():
        os.environ.setdefault(name, value)
    started = time.perf_counter()
    try:
        engine = _vllm("vllm.v1.engine.llm_engine").LLMEngine.from_engine_args(engine_args(spec))
        config = engine.vllm_config.scheduler_config
        _say({"event": "ready", "start_s": time.perf_counter() - started, "pid": os.getpid(),
              "max_num_batched_tokens": config.max_num_batched_tokens,
              "chunked_prefill": bool(getattr(config, "enable_chunked_prefill", False))})
    except Exception as exc:  # reported to the parent, which shows it with the engine's log
        traceback.print_exc()  # into the engine's log (stderr), where the cause is looked for
        _say({"event": "error", "error": f"engine start: {type(exc).__name__}: {exc}"})
        return 1
    count = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        command = json.loads(line)
        if command.get("op") == "quit":
            break
        count += 1
        try:
            _say(_generate(engine, command, count))
        except Exception as exc:
            traceback.print_exc()
            _say({"event": "error", "error": f"generate {command.get('name')}: {type(exc).__name__}: {exc}"})
            return 1
    engine.engine_core.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
