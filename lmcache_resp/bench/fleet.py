"""``--bridge --clients K``: K client processes on this host, each moving its own batch, either
each with its own in-process PagedRespStore (its own I/O threads and connections) or all
attached to one bridge (``python -m lmcache_resp.bridge``: one set of I/O threads and
connections for the host).

A fleet is a Driver like any client: its round runs each op in all K processes at once and is
rated on the host's aggregate (all K batches' bytes over the time from the first start to the
last finish); its CPU is every process's user+sys, the bridge's included. Each child verifies
every byte it reads back.

The children are ``python -m lmcache_resp.bench.fleet`` processes driven over their stdin and
stdout, one JSON line per command; credentials reach them (and the bridge) only through their
environment.

``--neighbour-flood`` (neighbour_flood below): client 0 times one-key EXISTS calls, first with
the others idle, then while clients 1..K-1 SET their batches in a loop; what the flood wrote is
read back and verified afterwards.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from lmcache_resp.bench.errors import BenchError
from lmcache_resp.bench.options import ALL_OPS, FLOOD_SETTLE_S, PROBE_END_SHARE
from lmcache_resp.bench.measure import OpSample
from lmcache_resp.bench.target import Target
from lmcache_resp.bench.workload import Mismatch, VerificationError
from lmcache_resp.errors import RespError

__all__ = ["MODES", "FleetDriver", "FloodRun", "server_connections"]

MODES = ("bridge", "independent")
CREDENTIAL_ENV = ("LMCACHE_RESP_USERNAME", "LMCACHE_RESP_PASSWORD")


def _credential_env(target: Target) -> dict[str, str]:
    """The environment for children and the bridge: the target's credentials, nothing else of
    the kind inherited."""
    env = {k: v for k, v in os.environ.items() if k not in CREDENTIAL_ENV}
    s = target.settings
    if s.username:
        env["LMCACHE_RESP_USERNAME"] = s.username
    if s.password is not None:
        env["LMCACHE_RESP_PASSWORD"] = s.password.reveal()
    return env


def _bridge_url(target: Target) -> tuple[str, bool]:
    """The target as the bridge's --url (no credentials), and whether it is a cluster."""
    s = target.settings
    if s.unix_path is not None:
        return f"unix://{s.unix_path}", False
    db = f"/{s.db}" if s.db else ""
    return "redis://" + ",".join(s.endpoints) + db, bool(s.cluster)


def _process_cpu(pid: int) -> float:
    """user+sys seconds of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_connections(target: Target) -> int | None:
    """Connections the server(s) hold now (``INFO clients``, summed), this probe's own not
    counted; None where a server cannot be asked."""
    s = target.settings
    total = 0
    for endpoint in ([s.unix_path] if s.unix_path else s.endpoints):
        try:
            total += _connected_clients(endpoint, s.username, s.password.reveal() if s.password else None) - 1
        except (OSError, ValueError):
            return None
    return total


def _connected_clients(endpoint: str, username: str | None, password: str | None) -> int:
    if endpoint.startswith("/"):
        probe = socket.socket(socket.AF_UNIX)
        probe.settimeout(5)
        probe.connect(endpoint)
    else:
        host, _, port = endpoint.rpartition(":")
        probe = socket.create_connection((host.strip("[]"), int(port)), timeout=5)
    with probe, probe.makefile("rb") as replies:
        def command(*args: str) -> bytes:
            parts = [f"*{len(args)}\r\n".encode()]
            for arg in args:
                data = arg.encode()
                parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
            probe.sendall(b"".join(parts))
            head = replies.readline()
            if head.startswith(b"$"):
                return replies.read(int(head[1:]) + 2)[:-2]
            if head.startswith(b"-"):
                raise ValueError(head.decode(errors="replace").strip())
            return head

        if password is not None:
            command("AUTH", *([username] if username else []), password)
        for line in command("INFO", "clients").splitlines():
            if line.startswith(b"connected_clients:"):
                return int(line.split(b":")[1])
    raise ValueError("INFO clients has no connected_clients")


@dataclass(frozen=True)
class FloodRun:
    """One neighbour flood: client 0's one-key EXISTS latencies (seconds), quiet and flooded, and
    what clients 1..K-1 moved meanwhile (their SET payload, from the first one's start to the
    last one's finish)."""

    quiet: list[float]
    flooded: list[float]
    flood_bytes: int
    flood_seconds: float
    flood_batches: int


class FleetDriver:
    """K client processes, each its own store (``independent``) or attached to one bridge."""

    supported_ops = ALL_OPS

    def __init__(
        self, mode: str, clients: int, target: Target, keys: Sequence[Sequence[str]], *, chunk_bytes: int,
        num_workers: int, seed: int, timeout: float, cpu_affinity: str | None,
        client_inflight_mib: float | None = None,
    ) -> None:
        assert mode in MODES
        self.mode = mode
        self.name = f"{mode} x{clients}"
        self.clients = clients
        self.chunk_bytes = chunk_bytes
        self.num_workers = num_workers
        self.timeout = timeout
        self.keys_per_client = len(keys[0])
        # The bridge's --client-inflight-mb (None: its default).
        self.client_inflight_mib = client_inflight_mib
        self._bridge: subprocess.Popen[bytes] | None = None
        # The bridge's socket; None for independent stores.
        self.socket: Path | None = None
        self._children: list[subprocess.Popen[bytes]] = []
        self._dir = Path(tempfile.mkdtemp(prefix="lmcache-resp-fleet-"))
        env = _credential_env(target)
        connections_before = server_connections(target)
        try:
            if mode == "bridge":
                self._start_bridge(target, env, cpu_affinity)
            for i, client_keys in enumerate(keys):
                self._start_child(i, target, env, client_keys, seed + i, cpu_affinity)
            for i in range(clients):
                self._expect(i, "ready")
        except BaseException:
            self.close()
            raise
        after = server_connections(target)
        self.connections = None if after is None or connections_before is None else after - connections_before

    def _start_bridge(self, target: Target, env: dict[str, str], cpu_affinity: str | None) -> None:
        url, cluster = _bridge_url(target)
        self.socket = self._dir / "bridge.sock"
        args = [sys.executable, "-m", "lmcache_resp.bridge", "--url", url, "--socket", str(self.socket),
                "--page-size", str(self.chunk_bytes), "--num-pages", str(self.clients * self.keys_per_client),
                "--num-workers", str(self.num_workers), "--timeout", str(self.timeout)]
        if cluster:
            args.append("--cluster")
        if self.client_inflight_mib is not None:
            args += ["--client-inflight-mb", repr(self.client_inflight_mib)]
        if cpu_affinity is not None:
            args += ["--cpu-affinity", cpu_affinity]
        log = open(self._dir / "bridge.log", "wb")  # noqa: SIM115 - the bridge writes it while it runs
        with log:
            self._bridge = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 60
        while not self.socket.exists():
            if self._bridge.poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"the bridge did not start: {(self._dir / 'bridge.log').read_text()[-2000:]}")
            time.sleep(0.05)

    def _start_child(
        self, index: int, target: Target, env: dict[str, str], keys: Sequence[str], seed: int, cpu_affinity: str | None
    ) -> None:
        config = {
            "mode": self.mode, "socket": str(self.socket or ""), "keys": list(keys),
            "chunk_bytes": self.chunk_bytes, "seed": seed, "num_workers": self.num_workers,
            "cpu_affinity": cpu_affinity, "timeout": self.timeout, "name": f"{self.name}[{index}]",
            "connect": {k: v for k, v in target.connect_kwargs().items() if k not in ("username", "password")},
        }
        child = subprocess.Popen([sys.executable, "-m", "lmcache_resp.bench.fleet"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, env=env)
        self._children.append(child)
        self._send(index, config)

    def _send(self, index: int, message: dict[str, Any]) -> None:
        stdin = self._children[index].stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps(message).encode() + b"\n")
            stdin.flush()
        except BrokenPipeError:
            raise BenchError(f"{self.name}: client {index} exited") from None

    def _expect(self, index: int, what: str) -> dict[str, Any]:
        stdout = self._children[index].stdout
        assert stdout is not None
        line = _read_line(stdout, self.timeout * 2 + 60)
        if not line:
            raise BenchError(f"{self.name}: client {index} exited (expected {what})")
        reply: dict[str, Any] = json.loads(line)
        if "mismatches" in reply:
            raise VerificationError([Mismatch(**m) for m in reply["mismatches"]])
        if "error" in reply:
            raise RespError(f"{self.name}: client {index}: {reply['error']}")
        return reply

    def _all(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        for i in range(self.clients):
            self._send(i, message)
        return [self._expect(i, message["cmd"]) for i in range(self.clients)]

    def describe(self) -> str:
        where = ("one bridge process (its I/O threads and connections), the clients attached over a Unix socket"
                 if self.mode == "bridge" else "each process its own PagedRespStore (own I/O threads and connections)")
        opened = "unknown" if self.connections is None else str(self.connections)
        return (f"{self.clients} client processes x {self.keys_per_client} keys; {where}; "
                f"{self.num_workers} I/O workers per engine; server connections opened: {opened}")

    def run_round(self, round_index: int, ops: Sequence[str]) -> dict[str, OpSample]:
        self._all({"cmd": "fill", "round": round_index})
        samples = {}
        for op in ("set", *(op for op in ALL_OPS[1:] if op in ops)):
            bridge_cpu = _process_cpu(self._bridge.pid) if self._bridge is not None else 0.0
            replies = self._all({"cmd": op, "round": round_index})
            if self._bridge is not None:
                bridge_cpu = _process_cpu(self._bridge.pid) - bridge_cpu
            seconds = max(r["t1"] for r in replies) - min(r["t0"] for r in replies)
            keys = sum(r["keys"] for r in replies)
            payload = keys * self.chunk_bytes if op in ("set", "get") else 0
            samples[op] = OpSample(op, max(seconds, 1e-9), keys, payload, sum(r["cpu"] for r in replies) + bridge_cpu)
        return samples

    def neighbour_flood(self, round_index: int, *, flood_seconds: float, samples: int, gap: float) -> FloodRun:
        """Client 0 probes (``samples`` one-key EXISTS, ``gap`` seconds apart) with the others
        idle, then again while clients 1..K-1 each SET their batch in a loop for
        ``flood_seconds``; then every client reads its keys back, verified."""
        assert self.clients >= 2, "a neighbour flood needs a prober and at least one flooder"
        self._all({"cmd": "fill", "round": round_index})
        self._all({"cmd": "set", "round": round_index})  # the probe's key exists from here on
        settle = min(FLOOD_SETTLE_S, flood_seconds / 10)
        probe = {"cmd": "probe", "samples": samples, "until": flood_seconds * PROBE_END_SHARE - settle, "gap": gap}
        self._send(0, probe)
        quiet: list[float] = self._expect(0, "probe")["latencies"]
        for i in range(1, self.clients):  # replies collected after the probe
            self._send(i, {"cmd": "flood", "seconds": flood_seconds})
        time.sleep(settle)
        self._send(0, probe)
        flooded: list[float] = self._expect(0, "probe")["latencies"]
        floods = [self._expect(i, "flood") for i in range(1, self.clients)]
        self._all({"cmd": "get", "round": round_index})
        return FloodRun(
            quiet, flooded, flood_bytes=sum(f["bytes"] for f in floods),
            flood_seconds=max(f["t1"] for f in floods) - min(f["t0"] for f in floods),
            flood_batches=sum(f["batches"] for f in floods),
        )

    def close(self) -> None:
        for i, child in enumerate(self._children):
            if child.poll() is None:
                try:
                    self._send(i, {"cmd": "close"})
                except BenchError:
                    pass
        for child in self._children:
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        self._children = []
        if self._bridge is not None:
            self._bridge.send_signal(signal.SIGTERM)
            try:
                self._bridge.wait(30)
            except subprocess.TimeoutExpired:
                self._bridge.kill()
                self._bridge.wait()
            self._bridge = None
        shutil.rmtree(self._dir, ignore_errors=True)


def _read_line(stream: IO[bytes], timeout: float) -> bytes:
    """One line, or b"" when the child exits; BenchError when it says nothing for ``timeout``."""
    ready, _, _ = select.select([stream], [], [], timeout)
    if not ready:
        raise BenchError(f"a fleet client said nothing for {timeout:.0f} s")
    return stream.readline()


# -- the child ---------------------------------------------------------------------------------


def _child() -> int:
    """One client process: its own store or the bridge's, its own keys, commands on stdin."""
    import resource

    from lmcache_resp import PagedRespStore
    from lmcache_resp.bench.workload import Workload

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    def reply(message: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    config = json.loads(sys.stdin.readline())
    keys = config["keys"]
    try:
        if config["mode"] == "bridge":
            store = PagedRespStore.attach(config["socket"], timeout=config["timeout"])
        else:
            extra = {"cpu_affinity": config["cpu_affinity"]} if config["cpu_affinity"] else {}
            store = PagedRespStore(page_size=config["chunk_bytes"], num_pages=len(keys),
                                   num_workers=config["num_workers"], **config["connect"], **extra)
        pages = store.allocate_many(len(keys))
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        reply({"error": f"{type(exc).__name__}: {exc}"})
        return 1
    buffers = [page.numpy() for page in pages]
    workload = Workload(keys, config["chunk_bytes"], config["seed"])
    reply({"ready": True})
    for line in sys.stdin:
        command = json.loads(line)
        cmd = command["cmd"]
        if cmd == "close":
            break
        try:
            if cmd == "fill":
                workload.fill(buffers, command["round"])
                reply({"ok": True})
                continue
            if cmd == "flood":
                reply(_flood(store, keys, pages, config["chunk_bytes"], command["seconds"]))
                continue
            if cmd == "probe":
                reply({"latencies": _probe(store, keys[0], command["samples"], command["until"], command["gap"])})
                continue
            if cmd == "get":
                workload.poison(buffers)
            repeat = workload.exists_repeat if cmd == "exists" else 1
            cpu_before, t0 = cpu(), time.perf_counter()
            found = _timed_op(store, cmd, keys, pages, repeat)
            t1, used = time.perf_counter(), cpu() - cpu_before
            if cmd == "get":
                workload.check(config["name"], command["round"], buffers, found)
            elif cmd != "set" and not all(found):
                raise RuntimeError(f"{cmd.upper()} did not find every key just written (maxmemory eviction?)")
            reply({"t0": t0, "t1": t1, "cpu": used, "keys": len(keys) * repeat})
        except VerificationError as exc:
            reply({"mismatches": [asdict(m) for m in exc.mismatches]})
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            reply({"error": f"{type(exc).__name__}: {exc}"})
    store.close()
    return 0


def _flood(store: Any, keys: list[str], pages: list[Any], chunk_bytes: int, seconds: float) -> dict[str, Any]:
    """SETs the whole batch again and again until ``seconds`` have passed (at least once)."""
    batches = 0
    t0 = time.perf_counter()
    while True:
        store.put(keys, pages)
        batches += 1
        t1 = time.perf_counter()
        if t1 - t0 >= seconds:
            break
    return {"bytes": batches * len(keys) * chunk_bytes, "seconds": t1 - t0, "batches": batches, "t0": t0, "t1": t1}


def _probe(store: Any, key: str, samples: int, until: float, gap: float) -> list[float]:
    """Up to ``samples`` one-key EXISTS calls ``gap`` seconds apart, each timed, none started
    ``until`` seconds from now or later (one at least); each must find the key."""
    deadline = time.monotonic() + until
    latencies: list[float] = []
    while len(latencies) < samples and (not latencies or time.monotonic() < deadline):
        t0 = time.perf_counter()
        found = store.exists([key])
        latencies.append(time.perf_counter() - t0)
        if found != [True]:
            raise RuntimeError(f"EXISTS of {key!r}, written before the probe, answered {found!r}")
        time.sleep(gap)
    return latencies


def _timed_op(store: Any, op: str, keys: list[str], pages: list[Any], repeat: int) -> list[bool]:
    """The op on every key (EXISTS ``repeat`` times); what each key answered (SET: all True)."""
    if op == "set":
        store.put(keys, pages)
        return [True] * len(keys)
    if op == "get":
        hits: list[bool] = store.get(keys, pages)
        return hits
    if op == "exists":
        answers: list[list[bool]] = [store.exists(keys) for _ in range(repeat)]
        return [all(per_key) for per_key in zip(*answers)]
    if op == "delete":
        deleted: list[bool] = store.delete(keys)
        return deleted
    raise ValueError(f"unknown command {op!r}")


if __name__ == "__main__":
    sys.exit(_child())
