"""A peer that is a program of its own (memtier_benchmark, redis-benchmark): asked what it is
before anything is measured, so that a binary that cannot run here, hangs, or is some other
program (``--memtier /bin/true``) stops the run with exit status 2, naming the binary and what
it answered, instead of leaving the comparison empty under "All tests passed"."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable

from lmcache_resp.bench.errors import BenchError

__all__ = ["VERSION_TIMEOUT_S", "version_of"]

# How long `PROGRAM --version` may take: a program that answers at all does so in milliseconds.
VERSION_TIMEOUT_S = 10.0
# How much of an answer a message shows.
SHOWN_CHARS = 200


def version_of(binary: str, peer: str, parse: Callable[[str], str | None], *, expected: str) -> str:
    """The version ``binary --version`` reports, read by ``parse`` (None: not ``expected``'s
    answer). BenchError, naming the binary and what it answered, when it cannot be started, does
    not answer within VERSION_TIMEOUT_S (it and anything it started are killed), exits with an
    error, or answers something ``parse`` does not recognise."""
    try:
        process = subprocess.Popen([binary, "--version"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as exc:
        raise BenchError(f"--compare {peer}: cannot run {binary}: {exc}") from None
    try:
        out, _ = process.communicate(timeout=VERSION_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        raise BenchError(f"--compare {peer}: {binary} --version did not answer within {VERSION_TIMEOUT_S:g} s "
                         f"(killed): it is not {expected} that can run here") from None
    except BaseException:
        _kill_group(process)
        raise
    said = out.decode(errors="replace").strip()
    version = parse(said) if process.returncode == 0 else None
    if version is None:
        shown = repr(said[:SHOWN_CHARS]) + ("..." if len(said) > SHOWN_CHARS else "") if said else "nothing"
        raise BenchError(f"--compare {peer}: {binary} is not {expected}: `{binary} --version` answered {shown} "
                         f"(exit status {process.returncode})")
    return version


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """Kills the program and whatever it started (which may hold its output open), and reaps it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
    if process.stdout is not None:
        process.stdout.close()
