"""Who may attach to the bridge (#18): the kernel's word on the peer (SO_PEERCRED) against the
bridge's own uid, --allow-uid and --allow-gid; the socket file's mode and group whatever the
umask, as the systemd example sets them up; a --socket path that is a regular file, a live
socket or a stale one; and a bridge out of file descriptors, which pauses accepting rather
than spin.

Clients of another uid are real processes: the test's interpreter, which drops to that uid,
gid and groups itself once it has imported lmcache_resp (what subprocess's user=/group=/
extra_groups= do, but after the exec: the interpreter may live where that uid cannot read,
e.g. a pyenv under /root). connect() and SO_PEERCRED see the same credentials either way.
Those tests need root; the others run as anyone.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import resource
import shlex
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import PAGE, REPO, BridgeProcess, RedisServer, pattern
from lmcache_resp_testing import cli
from lmcache_resp_testing.servers import redis_py

from lmcache_resp import PagedRespStore, bridge as bridge_cli

NOBODY = 65534  # the uid the clients of another user run as
GROUP = 4242  # a gid nobody holds: only the clients given it, and the bridge started with it
UNIT = REPO / "examples" / "bridge" / "lmcache-resp-bridge.service"

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root: runs clients as uid 65534 and the bridge with another gid"
)

# A client of another uid: argv is socket, key, seed, uid, gid, groups (JSON), and a pid to
# claim in a raw Hello ("-" for a PagedRespStore attach and a SET/GET round trip). Prints one
# JSON line: who it ran as, and what happened.
CLIENT = r"""
import json, os, socket, struct, sys
from lmcache_resp import PagedRespStore
from lmcache_resp_testing import pattern

path, key, seed, uid, gid, groups, claim = sys.argv[1:8]
os.setgroups(json.loads(groups))
os.setgid(int(gid))
os.setuid(int(uid))
out = {"pid": os.getpid(), "uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(),
       "groups": sorted(os.getgroups())}
try:
    if claim == "-":
        with PagedRespStore.attach(path, timeout=5) as store:
            page = store.allocate_many(1)[0]
            want = pattern(page.size, int(seed))
            page.write_bytes(want)
            store.put([key], [page])
            page.write_bytes(bytes(page.size))
            out["hits"] = store.get([key], [page])
            out["same_bytes"] = bytes(page.byte_array) == want
    else:  # a Hello that lies about its pid; the answer as it came
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(path)
            body = bytes([1]) + b"LMCRBRDG" + struct.pack("<III", 3, int(claim), 0)
            # A uid the bridge does not serve is refused as it connects: the refusal may be
            # there (and the socket closed) before the Hello goes, as for the client library.
            try:
                sock.sendall(struct.pack("<I", len(body)) + body)
            except (BrokenPipeError, ConnectionResetError):
                pass
            reply = b""
            while True:
                try:
                    chunk = sock.recv(65536)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                reply += chunk
        out["reply"] = reply[4:].decode("latin-1")
    out["outcome"] = "ok"
except Exception as exc:
    out["outcome"] = "error"
    out["error"] = type(exc).__name__
    out["bases"] = [cls.__name__ for cls in type(exc).__mro__]
    out["message"] = str(exc)
print(json.dumps(out))
"""


def run_client(
    socket_path: Path, *, uid: int = NOBODY, gid: int = NOBODY, groups: tuple[int, ...] = (), key: str = "k",
    seed: int = 1, claim_pid: int | None = None,
) -> dict[str, Any]:
    """CLIENT as uid/gid/groups; checks it ran as them and printed its real pid."""
    argv = [str(socket_path), key, str(seed), str(uid), str(gid), json.dumps(list(groups)),
            "-" if claim_pid is None else str(claim_pid)]
    child = subprocess.Popen([sys.executable, "-c", CLIENT, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=cli.environment(), text=True)
    stdout, stderr = child.communicate(timeout=30)
    assert child.returncode == 0, stderr
    out: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    assert out["pid"] == child.pid
    assert (out["uid"], out["euid"], out["gid"], out["groups"]) == (uid, uid, gid, sorted(groups)), out
    return out


def assert_round_trip(out: dict[str, Any], redis_server: RedisServer, key: str, seed: int) -> None:
    assert out["outcome"] == "ok", out
    assert out["hits"] == [True] and out["same_bytes"] is True, out
    assert redis_py(redis_server).get(key) == pattern(PAGE, seed), "the bytes the child wrote are in redis"


def assert_served_here(socket_path: Path, redis_server: RedisServer, key: str, seed: int, timeout: float = 10.0) -> None:
    """A store attached from this process stores a page under ``key``, reads it back whole, and
    redis holds its bytes."""
    with PagedRespStore.attach(socket_path, timeout=timeout) as store:
        page = store.allocate_many(1)
        page[0].write_bytes(pattern(PAGE, seed))
        store.put([key], page)
        page[0].write_bytes(bytes(PAGE))
        assert store.get([key], page) == [True]
        assert bytes(page[0].byte_array) == pattern(PAGE, seed)
    assert redis_py(redis_server).get(key) == pattern(PAGE, seed)


def assert_refused_by_peercred(out: dict[str, Any], socket_path: Path, served: str) -> None:
    """Refused after connecting, by the uid the kernel gave: the message says who and why."""
    assert out["outcome"] == "error", out
    assert out["error"] == "AuthenticationError" and "RespError" in out["bases"], out
    assert out["message"] == (
        f"the bridge at {socket_path} refused: uid {NOBODY} (pid {out['pid']}) may not attach to this bridge: "
        f"it serves {served} (see --allow-uid, --allow-gid)"
    ), out["message"]


def assert_permission_denied(out: dict[str, Any], socket_path: Path) -> None:
    """Refused by the file system at connect(): the socket's mode or its directory's."""
    assert out["outcome"] == "error", out
    # Permanent: an AuthenticationError (never worth retrying) saying what decides it.
    assert out["error"] == "AuthenticationError", out
    assert out["message"].startswith(
        f"cannot attach to the bridge at {socket_path}: Permission denied (os error 13): this user (uid {NOBODY}) "
        "may not open it: "
    ), out
    assert "--socket-mode" in out["message"], out


def log_line(process: BridgeProcess, needle: str, timeout: float = 5.0) -> str:
    """The first line of the bridge's log containing needle (the log is written as it goes)."""
    return log_line_any(process, [needle], timeout)


def log_line_any(process: BridgeProcess, needles: list[str], timeout: float = 5.0) -> str:
    """The first line of the bridge's log containing one of needles."""
    deadline = time.monotonic() + timeout
    while True:
        for line in process.log.read_text().splitlines():
            if any(needle in line for needle in needles):
                return line
        assert time.monotonic() < deadline, f"none of {needles!r} in the bridge's log:\n{process.log.read_text()}"
        time.sleep(0.02)


def socket_stat(path: Path) -> os.stat_result:
    st = path.lstat()
    assert stat.S_ISSOCK(st.st_mode), oct(st.st_mode)
    return st


def url(server: RedisServer) -> str:
    return f"redis://127.0.0.1:{server.port}"


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A 0755 directory every uid can reach (pytest's temp dirs sit under a 0700 one)."""
    base = next((d for d in (tempfile.gettempdir(), "/tmp") if os.stat(d).st_mode & 0o001), "/tmp")
    path = Path(tempfile.mkdtemp(prefix="lmcache-resp-access-", dir=base))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def bridges() -> Iterator[list[BridgeProcess]]:
    """Bridges a test starts, killed at its end whatever happened."""
    started: list[BridgeProcess] = []
    yield started
    for process in started:
        if process.process is not None:
            process.stop(signal.SIGKILL)


# -- SO_PEERCRED: the uid the kernel says, not what the socket's mode lets through ------------------


@needs_root
def test_another_uid_is_refused_by_peercred_even_on_a_world_connectable_socket(
    redis_server: RedisServer, open_dir: Path, bridges: list[BridgeProcess]
) -> None:
    path = open_dir / "bridge.sock"
    bridges.append(process := BridgeProcess(url(redis_server), path, "--socket-mode", "0666", umask=0o022))
    assert stat.S_IMODE(socket_stat(path).st_mode) == 0o666, "anyone may connect()"

    out = run_client(path, key="refused", seed=1)
    assert_refused_by_peercred(out, path, f"uid {os.geteuid()}")
    line = log_line(process, f"uid {NOBODY} (pid {out['pid']}) may not attach")
    assert "bridge: refused an attach" in line
    assert redis_py(redis_server).exists("refused") == 0 and redis_py(redis_server).dbsize() == 0

    # The pid is the kernel's too: a peer claiming another (in a Hello the bridge never needs
    # to read: it refuses the uid as it accepts) is answered with the real one.
    liar = run_client(path, claim_pid=1)
    assert liar["outcome"] == "ok", json.dumps(liar)
    assert liar["reply"].startswith("\x03LMCRBRDG"), liar["reply"][:9]  # Refused
    assert f"uid {NOBODY} (pid {liar['pid']}) may not attach to this bridge" in liar["reply"], liar["reply"]
    # Logged in full, or, within a second of the last refusal, counted in the next summary
    # line ("N connections refused in the last S s: N uid U (uid not allowed, last pid P)").
    log_line_any(process, [f"uid {NOBODY} (pid {liar['pid']}) may not attach", f"last pid {liar['pid']})"])
    assert "(pid 1)" not in process.log.read_text() and "last pid 1)" not in process.log.read_text()

    assert_served_here(path, redis_server, "own", 9)  # the bridge's own uid still attaches


@needs_root
@pytest.mark.parametrize("spelling", ["uid", "name"])
def test_an_allowed_uid_attaches_and_round_trips(
    redis_server: RedisServer, open_dir: Path, bridges: list[BridgeProcess], spelling: str
) -> None:
    if spelling == "name":
        try:
            allow = pwd.getpwuid(NOBODY).pw_name
        except KeyError:
            pytest.skip(f"uid {NOBODY} has no name on this host")
    else:
        allow = str(NOBODY)
    path = open_dir / "bridge.sock"
    bridges.append(process := BridgeProcess(url(redis_server), path, "--socket-mode", "0666", "--allow-uid", allow))

    out = run_client(path, key=f"allowed-{spelling}", seed=2)
    assert_round_trip(out, redis_server, f"allowed-{spelling}", 2)
    line = log_line(process, f"(pid {out['pid']}, uid {NOBODY}) attached")
    # The core's lines reach stderr through logging, in the bridge's format (docs/observability.md).
    assert " lmcache_resp.bridge INFO bridge: client " in line and "up to " in line, line
    log_line(process, f"(pid {out['pid']}, uid {NOBODY}) detached")


def test_unknown_user_and_group_names_are_refused_naming_them(capsys: pytest.CaptureFixture[str]) -> None:
    common = ["--url", "redis://127.0.0.1:1", "--socket", "/nonexistent/b.sock", "--page-size", "1", "--num-pages", "1"]
    for flag, name, what in (("--allow-uid", "no-such-user-4242", "user"), ("--allow-gid", "no-such-group-4242", "group")):
        with pytest.raises(SystemExit) as exit_:
            bridge_cli.main([*common, flag, name])
        assert exit_.value.code == 2
        assert f"argument {flag}: no {what} named '{name}' on this host" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bridge_cli.main([*common, "--allow-gid", str(1 << 32)])
    assert "argument --allow-gid: group 4294967296 is out of range" in capsys.readouterr().err
    root_user, root_group = pwd.getpwuid(0).pw_name, grp.getgrgid(0).gr_name
    parse_uid, parse_gid = bridge_cli._uid, bridge_cli._gid  # the argparse types
    assert (parse_uid(root_user), parse_uid("65534"), parse_gid(root_group), parse_gid("4242")) == (0, 65534, 0, 4242)


# -- the systemd example: a group's members attach, nobody else ---------------------------------------


def unit_layout() -> tuple[int, list[str]]:
    """RuntimeDirectoryMode and the access flags of the example unit's ExecStart, checked
    against what its comments promise, --allow-gid's group (lmcache) replaced by GROUP."""
    text = UNIT.read_text()
    settings = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    assert (settings["User"], settings["Group"], settings["UMask"]) == ("lmcache", "lmcache", "0077")
    exec_start = text.split("ExecStart=", 1)[1].split("\n")
    command = ""
    for piece in exec_start:
        command += piece.rstrip("\\")
        if not piece.endswith("\\"):
            break
    argv = shlex.split(command)
    flags = []
    for flag in ("--socket-mode", "--allow-gid"):
        value = argv[argv.index(flag) + 1]
        flags += [flag, str(GROUP) if flag == "--allow-gid" and value == settings["Group"] else value]
    assert flags == ["--socket-mode", "0660", "--allow-gid", str(GROUP)], flags
    return int(settings["RuntimeDirectoryMode"], 8), flags


@needs_root
def test_the_systemd_layout_admits_the_group_and_keeps_others_out(
    redis_server: RedisServer, open_dir: Path, bridges: list[BridgeProcess]
) -> None:
    dir_mode, flags = unit_layout()
    runtime = open_dir / "lmcache-resp"  # RuntimeDirectory=: owned by the service's user and group
    runtime.mkdir()
    os.chown(runtime, 0, GROUP)
    runtime.chmod(dir_mode)
    path = runtime / "bridge.sock"
    # Group= and a umask that would give the socket 0755.
    bridges.append(process := BridgeProcess(url(redis_server), path, *flags, group=GROUP, umask=0o022))
    st = socket_stat(path)
    assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o660, GROUP), (oct(st.st_mode), st.st_gid)
    assert stat.S_IMODE(runtime.stat().st_mode) == 0o750

    supplementary = run_client(path, groups=(GROUP,), key="member-supplementary", seed=3)
    assert_round_trip(supplementary, redis_server, "member-supplementary", 3)
    log_line(process, f"(pid {supplementary['pid']}, uid {NOBODY}) attached")
    primary = run_client(path, gid=GROUP, key="member-primary", seed=4)
    assert_round_trip(primary, redis_server, "member-primary", 4)

    outsider = run_client(path, key="outsider", seed=5)
    assert_permission_denied(outsider, path)
    assert f"pid {outsider['pid']}" not in process.log.read_text(), "it never reached the bridge"
    assert redis_py(redis_server).exists("outsider") == 0


@needs_root
def test_without_allow_gid_a_group_member_connects_but_is_refused(
    redis_server: RedisServer, open_dir: Path, bridges: list[BridgeProcess]
) -> None:
    dir_mode, flags = unit_layout()
    runtime = open_dir / "lmcache-resp"
    runtime.mkdir()
    os.chown(runtime, 0, GROUP)
    runtime.chmod(dir_mode)
    path = runtime / "bridge.sock"
    bridges.append(process := BridgeProcess(url(redis_server), path, *flags[:2], group=GROUP, umask=0o022))
    st = socket_stat(path)
    assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o660, GROUP)

    member = run_client(path, groups=(GROUP,), key="member", seed=6)
    assert_refused_by_peercred(member, path, f"uid {os.geteuid()}")
    log_line(process, f"bridge: refused an attach: uid {NOBODY} (pid {member['pid']}) may not attach")
    assert redis_py(redis_server).exists("member") == 0


# -- the socket's mode: --socket-mode, whatever the umask ------------------------------------------


@pytest.mark.parametrize(("umask", "extra", "mode"), [(0o077, (), 0o660), (0o000, ("--socket-mode", "0600"), 0o600)])
def test_the_socket_mode_does_not_depend_on_the_umask(
    redis_server: RedisServer, open_dir: Path, bridges: list[BridgeProcess], umask: int, extra: tuple[str, ...],
    mode: int,
) -> None:
    path = open_dir / "bridge.sock"
    bridges.append(BridgeProcess(url(redis_server), path, *extra, umask=umask))
    st = socket_stat(path)
    assert stat.S_IMODE(st.st_mode) == mode, f"{oct(st.st_mode)} with umask {umask:04o}"
    assert st.st_uid == os.geteuid() and st.st_gid == os.getegid()


@needs_root
def test_the_socket_mode_alone_keeps_other_uids_out(
    redis_server: RedisServer, open_dir: Path, bridges: list[BridgeProcess]
) -> None:
    """The directory lets everyone through; the default 0660 does not."""
    path = open_dir / "bridge.sock"
    bridges.append(BridgeProcess(url(redis_server), path, "--allow-uid", str(NOBODY), umask=0o000))
    st = socket_stat(path)
    assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o660, os.getegid())
    assert_permission_denied(run_client(path, key="outsider"), path)
    # The same uid in the socket's group gets through, and --allow-uid admits it.
    assert_round_trip(run_client(path, groups=(st.st_gid,), key="insider", seed=7), redis_server, "insider", 7)


# -- what is at --socket already -----------------------------------------------------------------------


def test_a_regular_file_at_the_socket_path_is_left_alone(redis_server: RedisServer, tmp_path: Path) -> None:
    path = tmp_path / "bridge.sock"
    content = b"precious: not a socket\n" + bytes(range(256))
    path.write_bytes(content)
    process = BridgeProcess(url(redis_server), path, start=False)
    done = subprocess.run(process.args, capture_output=True, text=True, timeout=30)
    assert done.returncode != 0
    assert f"{path} exists and is not a socket: refusing to replace it" in done.stderr, done.stderr
    assert path.read_bytes() == content and stat.S_ISREG(path.lstat().st_mode)


def test_a_live_socket_is_refused_and_the_bridge_on_it_keeps_serving(
    redis_server: RedisServer, tmp_path: Path, bridges: list[BridgeProcess]
) -> None:
    path = tmp_path / "bridge.sock"
    bridges.append(BridgeProcess(url(redis_server), path))
    inode = socket_stat(path).st_ino
    second = BridgeProcess(url(redis_server), path, start=False)
    done = subprocess.run(second.args, capture_output=True, text=True, timeout=30)
    assert done.returncode != 0
    assert f"{path} is in use: another bridge (or server) listens there" in done.stderr, done.stderr
    assert socket_stat(path).st_ino == inode, "the live socket is not replaced"
    assert_served_here(path, redis_server, "still-served", 10)


def test_a_stale_socket_is_replaced_and_served(
    redis_server: RedisServer, tmp_path: Path, bridges: list[BridgeProcess]
) -> None:
    path = tmp_path / "bridge.sock"
    with socket.socket(socket.AF_UNIX) as dead:  # a bridge that died: its file, no listener
        dead.bind(str(path))
        dead.listen()
    assert stat.S_IMODE(socket_stat(path).st_mode) != 0o660
    with pytest.raises(ConnectionRefusedError), socket.socket(socket.AF_UNIX) as probe:
        probe.connect(str(path))
    bridges.append(BridgeProcess(url(redis_server), path))
    assert stat.S_IMODE(socket_stat(path).st_mode) == 0o660, "the bridge's socket now"
    assert_served_here(path, redis_server, "after-stale", 11)


# -- out of file descriptors: pause, do not spin ---------------------------------------------------------

FD_LIMIT = 64  # the bridge needs about a dozen of its own


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_out_of_descriptors_the_bridge_pauses_accepting_instead_of_spinning(
    redis_server: RedisServer, tmp_path: Path, bridges: list[BridgeProcess]
) -> None:
    def limit_fds() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))

    path = tmp_path / "bridge.sock"
    bridges.append(process := BridgeProcess(url(redis_server), path, "--handshake-timeout", "30", preexec_fn=limit_fds))
    assert process.process is not None
    pid = process.process.pid
    assert len(os.listdir(f"/proc/{pid}/fd")) < FD_LIMIT // 2, "room for connections"
    # Connections that never say Hello: each holds a descriptor of the bridge's for 30 s, and
    # those past its limit wait in the listen backlog, keeping the listener readable.
    conns: list[socket.socket] = []
    try:
        for _ in range(200):
            conn = socket.socket(socket.AF_UNIX)
            conn.setblocking(False)
            try:
                conn.connect(str(path))
            except BlockingIOError:  # the backlog is full
                conn.close()
                break
            conns.append(conn)
        assert len(conns) > FD_LIMIT, "some wait in the backlog"
        log_line(process, "bridge: cannot accept connections (Too many open files")
        # (a thread of the bridge may hold one a moment: the accept retried next takes it)
        assert len(os.listdir(f"/proc/{pid}/fd")) >= FD_LIMIT - 2, "every descriptor in use"
        before = cpu_seconds(pid)
        time.sleep(1.5)
        used = cpu_seconds(pid) - before
        assert used < 0.15, f"the bridge burned {used:.2f} s of CPU in 1.5 s out of descriptors"
        assert "pausing attaches, retrying" in log_line(process, "cannot accept connections")
    finally:
        for conn in conns:
            conn.close()
    started = time.monotonic()
    assert_served_here(path, redis_server, "after-emfile", 12, timeout=10)
    assert time.monotonic() - started < 6, "attaches resumed within a few seconds"
