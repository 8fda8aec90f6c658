"""The watcher of a throwaway cluster: a process of its own (``python -I watcher.py watch DIR
OWNER``) that ends the cluster's servers once their owner is gone, so a benchmark or test run
that dies without cleaning up leaves no cluster behind. DIR/pids holds "PORT PID" per server and
DIR/server names their binary, so that a pid reused by another process is never signalled.

Only the standard library, and nothing else of this package: this file is run by path, in a
process that need not load the package (cluster.py imports it for the same functions).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["cluster_pids", "exited", "kill_servers", "main", "server_file", "start_watcher", "watch"]


def exited(pid: int) -> bool:
    """Gone, or a zombie waiting to be reaped with no thread left. Only then are its sockets
    closed: the main thread of a killed server turns zombie while its I/O and background threads,
    which share its file table, may still be exiting."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z" and len(tasks) <= 1


def server_file(directory: Path) -> Path:
    """Names the binary the cluster in ``directory`` runs, to tell its servers from whatever
    process gets a pid next."""
    return directory / "server"


def cluster_pids(directory: Path) -> list[int]:
    """The pids in DIR/pids that still run the cluster's server binary: a pid file outliving its
    servers must not make us signal whatever process got the pid next."""
    try:
        lines = (directory / "pids").read_text().splitlines()
    except OSError:
        return []
    try:
        binary = os.path.realpath(server_file(directory).read_text().strip())
    except OSError:
        binary = None
    pids = []
    for line in lines:
        pid = int(line.split()[1])
        try:
            # Unreadable once the process is a zombie: it has exited then.
            running = os.readlink(f"/proc/{pid}/exe")
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        ours = running == binary if binary is not None else b"-server" in cmdline
        if ours:
            pids.append(pid)
    return pids


def kill_servers(directory: Path) -> None:
    """SIGKILL, then wait until the servers have exited: callers reuse the ports right away.
    TimeoutError when one has not within 5 s."""
    pids = cluster_pids(directory)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid in pids:
        deadline = time.monotonic() + 5
        while not exited(pid):
            if time.monotonic() > deadline:
                raise TimeoutError(f"server {pid} did not exit within 5 s of SIGKILL")
            time.sleep(0.01)


def watch(directory: Path, owner: int) -> None:
    """Stops the cluster in ``directory`` once ``owner`` has exited; returns early once the
    servers are gone. Runs for the cluster's whole life, in a process of its own whose command
    line holds no password."""
    # Not ended by the Ctrl-C or hangup that ends the owner: then is when it has work to do.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    watched = cluster_pids(directory)
    try:
        # A pidfd cannot name a later process that reuses the owner's pid.
        owner_fd: int | None = os.pidfd_open(owner)
    except (AttributeError, OSError):
        owner_fd = None

    def owner_alive() -> bool:
        if owner_fd is not None:
            return not select.select([owner_fd], [], [], 1.0)[0]
        time.sleep(1.0)
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    while any(not exited(pid) for pid in watched) and owner_alive():
        pass
    kill_servers(directory)


def start_watcher(directory: Path, owner: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """The watcher of the cluster in ``directory`` (its servers started and in DIR/pids), in a
    process of its own: this file by path, isolated (-I: no script folder or user site on
    sys.path), as it needs the standard library only, not the package. ``env`` holds no secrets."""
    return subprocess.Popen(
        [sys.executable, "-I", os.path.abspath(__file__), "watch", str(directory), str(owner)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env=env,
    )


def main(argv: Sequence[str]) -> int:
    """``watcher.py watch DIR OWNER``: stop the cluster in DIR once process OWNER is gone."""
    if len(argv) != 3 or argv[0] != "watch" or not argv[2].isdigit():
        print(f"usage: {os.path.basename(__file__)} watch DIR OWNER_PID", file=sys.stderr)
        return 2  # usage (errors.EXIT_USAGE: this file imports nothing of the package)
    watch(Path(argv[1]), int(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

