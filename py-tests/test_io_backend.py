"""Which loop the I/O workers run (``io_backend``: docs/usage.md, "The I/O loop").

Both loops run every suite (scripts/test.sh runs each server pass on one of them through
``LMCACHE_RESP_IO_BACKEND``); here: the setting in every form, a store on each loop moving the
same bytes, and the fallback where io_uring is forbidden, in a child process that installs a
seccomp filter refusing ``io_uring_setup`` with EPERM, as Docker's default profile does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import RedisServer, pattern
from lmcache_resp import InvalidInputError, PagedRespStore, RespSettings

PAGE = 256 * 1024
KEYS = 24


def io_uring_fds() -> int:
    """io_uring instances this process holds (each worker on the ring loop makes one)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[io_uring]"
        except OSError:
            pass
    return count


def test_the_setting_in_every_form() -> None:
    assert RespSettings.resolve("redis://h:1", env={}).io_backend == "poll"
    assert RespSettings.resolve("redis://h:1", io_backend="uring", env={}).io_backend == "uring"
    assert RespSettings.resolve("redis://h:1?io_backend=auto", env={}).io_backend == "auto"
    env = {"LMCACHE_RESP_IO_BACKEND": "uring"}
    assert RespSettings.resolve("redis://h:1", env=env).io_backend == "uring"
    assert RespSettings.resolve("redis://h:1?io_backend=poll", env=env).io_backend == "poll", "the URL wins"
    assert RespSettings.resolve("redis://h:1", io_backend="auto", env=env).io_backend == "auto", "a keyword wins"
    with pytest.raises(InvalidInputError, match="io_backend must be \"auto\".*got 'epoll'"):
        RespSettings.resolve("redis://h:1", io_backend="epoll", env={})
    with pytest.raises(InvalidInputError, match='LMCACHE_RESP_IO_BACKEND must be "auto"'):
        RespSettings.resolve("redis://h:1", env={"LMCACHE_RESP_IO_BACKEND": "fast"})


@pytest.mark.parametrize("backend", ["poll", "uring"])
def test_each_loop_moves_the_same_bytes(redis_server: RedisServer, backend: str) -> None:
    before = io_uring_fds()
    url = f"redis://127.0.0.1:{redis_server.port}"
    with PagedRespStore(url, page_size=PAGE, num_pages=2 * KEYS, num_workers=2, io_backend=backend) as store:
        rings = io_uring_fds() - before
        assert rings == (2 if backend == "uring" else 0), f"{rings} io_uring instance(s) for io_backend={backend}"
        assert store.placement["io_loop"] == {"loop": backend, "setting": backend, "why": f'io_backend="{backend}" asks for it'}
        keys = [f"io-{backend}-{i}" for i in range(KEYS)]
        pages = store.allocate_many(KEYS)
        # Values of every size up to a page: several land in the middle of a receive.
        sent = [pattern(PAGE - 977 * i, i) for i in range(KEYS)]
        for page, data in zip(pages, sent):
            memoryview(page)[: len(data)] = data
        store.put(keys, pages, [len(data) for data in sent])
        back = store.allocate_many(KEYS)
        assert store.get_lengths(keys, back) == [len(data) for data in sent]
        for page, data in zip(back, sent):
            assert bytes(memoryview(page)[: len(data)]) == data
        assert store.get([f"io-missing-{i}" for i in range(4)], back[:4]) == [False] * 4


# The child: a seccomp filter that refuses one of io_uring's system calls with EPERM (as
# Docker's default profile refuses io_uring_setup, or a sandbox only io_uring_enter), installed
# before the store starts, or once it runs on the ring (for every thread: SECCOMP_FILTER_FLAG_TSYNC);
# then a store with the setting and the server the parent gives moves bytes before and after.
CHILD = r"""
import ctypes, json, logging, os, platform, sys

class Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

class Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(Filter))]

url, backend, refused, when = sys.argv[1:5]
# io_uring_setup and io_uring_enter are 425 and 426 on every architecture that has them.
NR = {"io_uring_setup": 425, "io_uring_enter": 426}[refused]
EPERM = 1
program = (Filter * 4)(
    Filter(0x20, 0, 0, 0),                       # load seccomp_data.nr
    Filter(0x15, 0, 1, NR),                      # the refused call?
    Filter(0x06, 0, 0, 0x00050000 | EPERM),      # then fail with EPERM
    Filter(0x06, 0, 0, 0x7FFF0000),              # else allow
)
libc = ctypes.CDLL(None, use_errno=True)
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
# Before any thread starts: every thread (the store's workers too) inherits it, which a filter
# synchronized to all threads later requires.
assert libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, ctypes.get_errno()

def refuse():
    if when == "start":
        assert libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(Program(4, program)), 0, 0) == 0, ctypes.get_errno()
        return
    SYS_SECCOMP = {"x86_64": 317, "aarch64": 277}[platform.machine()]
    SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 1, 1
    done = libc.syscall(SYS_SECCOMP, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, ctypes.byref(Program(4, program)))
    assert done == 0, (done, ctypes.get_errno())

records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append((record.levelname, record.name, record.getMessage()))
logging.getLogger("lmcache_resp").addHandler(Keep())
logging.getLogger("lmcache_resp").setLevel(logging.INFO)

from lmcache_resp import PagedRespStore
from lmcache_resp_testing import pattern

def rings():
    return sum(os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[io_uring]" for fd in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{fd}"))

def round_trip(store, name, seed):
    pages = store.allocate_many(4)
    data = [pattern(65536 - i, seed + i) for i in range(4)]
    for page, value in zip(pages, data):
        memoryview(page)[: len(value)] = value
    keys = [f"{name}-{i}" for i in range(4)]
    store.put(keys, pages, [len(v) for v in data])
    back = store.allocate_many(4)
    lengths = store.get_lengths(keys, back)
    same = lengths == [len(v) for v in data] and all(bytes(memoryview(p)[: len(v)]) == v for p, v in zip(back, data))
    for page in pages + back:
        store.free(page)
    return same

out = {}
if when == "start":
    refuse()
try:
    with PagedRespStore(url, page_size=65536, num_pages=16, num_workers=2, io_backend=backend) as store:
        out["same_bytes"] = round_trip(store, "fb", 0)
        out["rings"] = rings()
        if when == "running":
            refuse()
            # Every worker's next wait is refused: each gives up its ring and polls.
            out["same_bytes_after"] = all(round_trip(store, f"after{n}", 10 * n) for n in range(3))
        out["io_loop"] = store.placement["io_loop"]
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
import time; time.sleep(0.2)  # the core's log queue drains into logging
out["logs"] = records
print(json.dumps(out))
"""


def run_forbidden(server: RedisServer, backend: str, refused: str = "io_uring_setup", when: str = "start") -> dict[str, object]:
    repo = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "LMCACHE_RESP_IO_BACKEND"}
    env["PYTHONPATH"] = os.pathsep.join([str(repo), str(repo / "testing"), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", CHILD, f"redis://127.0.0.1:{server.port}", backend, refused, when],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )
    assert done.returncode == 0, f"the child ended with {done.returncode}: {done.stderr}"
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_auto_falls_back_to_poll_with_one_info_line_where_io_uring_is_forbidden(redis_server: RedisServer) -> None:
    result = run_forbidden(redis_server, "auto")
    assert "error" not in result, result
    assert result["same_bytes"] is True and result["rings"] == 0, result
    said = [r for r in result["logs"] if "io_backend=auto" in r[2]]  # type: ignore[union-attr]
    assert len(said) == 1, result["logs"]
    level, logger, message = said[0]
    assert level == "INFO" and logger.startswith("lmcache_resp"), said
    assert "io_uring is unavailable (forbidden here" in message and "Operation not permitted" in message, message
    assert message.endswith("the I/O workers run the poll loop"), message
    # What the store reports, and the benchmark's header shows (#42): the loop, and why.
    io_loop = result["io_loop"]
    assert isinstance(io_loop, dict) and (io_loop["loop"], io_loop["setting"]) == ("poll", "auto"), io_loop
    assert io_loop["why"].startswith('io_backend="auto": io_uring is unavailable (forbidden here'), io_loop
    said = [r for r in result["logs"] if "PagedRespStore I/O loop:" in r[2]]  # type: ignore[union-attr]
    assert [r[2] for r in said] == [f"PagedRespStore I/O loop: poll ({io_loop['why']})"], result["logs"]


def test_uring_where_io_uring_is_forbidden_is_refused_at_start_saying_why(redis_server: RedisServer) -> None:
    result = run_forbidden(redis_server, "uring")
    error = str(result.get("error"))
    assert error.startswith("RespOSError: "), result
    assert 'io_backend="uring" cannot run here: io_uring is unavailable (forbidden here' in error, result
    assert 'set io_backend="poll" or "auto"' in error, error


def test_auto_takes_io_uring_where_it_is_allowed(redis_server: RedisServer) -> None:
    before = io_uring_fds()
    with PagedRespStore(f"redis://127.0.0.1:{redis_server.port}", page_size=4096, num_pages=4, num_workers=3, io_backend="auto") as store:
        assert io_uring_fds() - before == 3
        assert store.placement["io_loop"] == {"loop": "uring", "setting": "auto",
                                              "why": 'io_backend="auto": this process may use io_uring'}
        page = store.allocate()
        assert page is not None
        memoryview(page)[:] = pattern(4096, 7)
        store.put(["auto-1"], [page])
        back = store.allocate()
        assert back is not None and store.get(["auto-1"], [back]) == [True]
        assert bytes(memoryview(back)) == pattern(4096, 7)


def test_auto_falls_back_where_io_uring_can_be_set_up_but_not_entered(redis_server: RedisServer) -> None:
    # A filter that refuses only io_uring_enter: the probe used to make a ring without entering
    # it, chose the ring, and the first cancel's wait aborted the process (#42). The probe now
    # enters a ring and reaps a no-op: auto polls, saying why, and uring is refused at start.
    result = run_forbidden(redis_server, "auto", "io_uring_enter")
    assert "error" not in result, result
    assert result["same_bytes"] is True and result["rings"] == 0, result
    io_loop = result["io_loop"]
    assert isinstance(io_loop, dict) and io_loop["loop"] == "poll", io_loop
    assert "io_uring is unavailable (forbidden here" in io_loop["why"] and "refuses io_uring_enter" in io_loop["why"], io_loop
    result = run_forbidden(redis_server, "uring", "io_uring_enter")
    error = str(result.get("error"))
    assert error.startswith("RespOSError: ") and "refuses io_uring_enter" in error, result
    assert 'set io_backend="poll" or "auto"' in error, error


@pytest.mark.parametrize("backend", ["auto", "uring"])
def test_a_ring_refused_once_the_store_runs_moves_the_workers_to_poll_and_the_host_lives_on(
    redis_server: RedisServer, backend: str
) -> None:
    # The ring works at start; then a filter (all threads) refuses io_uring_enter. Each worker's
    # next wait is refused: it gives its ring up (never entering it again), reopens its
    # connections on the poll loop and goes on. The process lives (before #42: SIGABRT), every
    # byte after comes back right, and the store says which loop it runs and why.
    result = run_forbidden(redis_server, backend, "io_uring_enter", "running")
    assert "error" not in result, result
    assert result["same_bytes"] is True and result["rings"] == 2, result
    assert result["same_bytes_after"] is True, result
    io_loop = result["io_loop"]
    assert isinstance(io_loop, dict) and (io_loop["loop"], io_loop["setting"]) == ("poll", backend), io_loop
    assert "the kernel refused io_uring_enter (Operation not permitted" in io_loop["why"], io_loop
    assert io_loop["why"].endswith("the workers whose ring failed moved to the poll loop"), io_loop
    warned = [r for r in result["logs"] if r[0] == "WARNING" and "runs the poll loop from now on" in r[2]]  # type: ignore[union-attr]
    assert 1 <= len(warned) <= 2, result["logs"]
