"""Where a vLLM engine's warm time to first token goes (#43): py-spy over one engine life.

Run in scripts/test-vllm.sh's venv (py-spy installed there), under the exclusive CPU lock:

    flock -x CPU_LOCK VENV/bin/python bench/vllm_ttft_profile.py OUT_DIR [redis|valkey9] [ours|resp|valkey]

One stack (a throwaway server, ``lmcache server`` with the adapter, a fresh engine), three
recordings, each of every process of the engine (``py-spy record --subprocesses``, collapsed
stacks, 200 samples/s) and of LMCache's server:

1. ``first``: the first request after the engine started (64 tokens, a miss);
2. ``cold``: a 4097-token prompt, cold;
3. ``warm``: the same prompt 5 times warm from L2 (LMCache's L1 emptied before each).

OUT_DIR gets ``<step>-engine.txt`` and ``<step>-lmcache.txt`` (py-spy's raw output),
``<step>-top.txt`` (the frames that hold the most samples, own and total, per process) and
``timings.json`` (each request's TTFT and LMCache's prefetch line).
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lmcache_resp.bench.lmcache_l2 import adapter_spec
from lmcache_resp.bench.options import Options
from lmcache_resp_servers.server import RedisServer
from lmcache_resp.bench.target import Target
from lmcache_resp import RespSettings
from lmcache_resp.bench.vllm_model import CHUNK_TOKENS, write_model
from lmcache_resp.bench.vllm_stack import Engine, LMCacheServer, wait_for_keys
from lmcache_resp.bench.vllm_ttft import _prompt

RATE = 200


def record(pid: int, path: Path) -> subprocess.Popen[bytes]:
    py_spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen([str(py_spy), "record", "--pid", str(pid), "--subprocesses", "--format", "raw",
                             "--rate", str(RATE), "--nonblocking", "--output", str(path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(recorders: list[subprocess.Popen[bytes]]) -> None:
    for recorder in recorders:
        recorder.send_signal(signal.SIGINT)
    for recorder in recorders:
        recorder.wait(timeout=120)


def top(path: Path, limit: int = 25) -> list[str]:
    """The frames holding the most samples (total: anywhere in the stack; own: at its top)."""
    total: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        samples += n
        frames = stack.split(";")
        for frame in set(frames):
            total[frame] += n
        own[frames[-1]] += n
    out = [f"{path.name}: {samples} samples at {RATE}/s ({samples / RATE:.2f} s of busy threads)", "total:"]
    out += [f"  {n / RATE:7.2f} s  {frame}" for frame, n in total.most_common(limit)]
    out += ["own:"] + [f"  {n / RATE:7.2f} s  {frame}" for frame, n in own.most_common(limit)]
    return out


def main() -> int:
    out = Path(sys.argv[1])
    server_kind = sys.argv[2] if len(sys.argv) > 2 else "redis"
    adapter = sys.argv[3] if len(sys.argv) > 3 else "ours"
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="lmcache-resp-vllm-profile-"))
    redis = RedisServer(scratch / "redis", server=server_kind)
    try:
        settings = RespSettings(host="127.0.0.1", port=redis.port)
        spec, _ = adapter_spec(adapter, Target(settings, embedded=True), Options())
        assert spec is not None
        model = write_model(scratch / "model")
        server = LMCacheServer(spec, scratch, chunk_tokens=CHUNK_TOKENS)
        timings: dict[str, object] = {"server": server_kind, "adapter": adapter}
        try:
            engine = Engine({"model": str(model), "lmcache_port": server.port, "max_model_len": 4096 + 512}, scratch)
            timings["engine_start_s"] = engine.ready["start_s"]
            try:
                prompt = _prompt(16 * CHUNK_TOKENS + 1, 4)
                steps = [("first", [("first", _prompt(64, 1), False)]),
                         ("cold", [("cold", prompt, False)]),
                         ("warm", [(f"warm{i}", prompt, True) for i in range(5)])]
                for step, requests in steps:
                    recorders = [record(engine.process.pid, out / f"{step}-engine.txt"),
                                 record(server.process.pid, out / f"{step}-lmcache.txt")]
                    time.sleep(1.0)  # py-spy attached
                    for name, tokens, clear in requests:
                        if clear:
                            server.clear_l1()
                        result = engine.generate(name, tokens, 2)
                        lines = [p for p in server.prefetches() if p.request_id.startswith(name + "-")]
                        timings[name] = {"ttft_s": result["ttft_s"], "num_cached_tokens": result["num_cached_tokens"],
                                         "prefetch_ms": lines[-1].ms if lines else None}
                        if name == "cold":
                            wait_for_keys(redis.port, 16)
                    stop(recorders)
                    report = []
                    for side in ("engine", "lmcache"):
                        report += top(out / f"{step}-{side}.txt") + [""]
                    (out / f"{step}-top.txt").write_text("\n".join(report))
            finally:
                engine.close()
        finally:
            server.stop()
        (out / "timings.json").write_text(json.dumps(timings, indent=2))
        print(json.dumps(timings, indent=2))
    finally:
        redis.stop()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
