"""JSON-lines request/reply with a child process, every wait bounded: a wedged peer is
reported, never waited on forever."""

from __future__ import annotations

import collections
import json
import os
import select
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Any

from lmcache_resp.bench.errors import PeerFailed

__all__ = ["SubprocessChannel"]


class SubprocessChannel:
    def __init__(self, argv: Sequence[str], *, env: dict[str, str] | None = None) -> None:
        try:
            self.process = subprocess.Popen(
                list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
            )
        except OSError as exc:
            raise PeerFailed(f"cannot start {argv[0]}: {exc}") from None
        self._buffer = b""
        self._stderr: collections.deque[str] = collections.deque(maxlen=20)
        self._stderr_reader = threading.Thread(target=self._drain_stderr, name="peer-stderr", daemon=True)
        self._stderr_reader.start()

    def _drain_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._stderr.append(line.decode(errors="replace").rstrip())

    def stderr_tail(self) -> str:
        lines = [line for line in self._stderr if line]
        return " | ".join(lines[-5:]) if lines else "(nothing on stderr)"

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(json.dumps(message).encode() + b"\n")
            self.process.stdin.flush()
        except OSError:
            raise PeerFailed(f"the driver is gone (exit status {self.process.poll()}); its stderr: {self.stderr_tail()}") from None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PeerFailed(f"no reply to {message.get('op')!r} within {timeout:g} s (peer hung); "
                                 f"its stderr: {self.stderr_tail()}")
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    self.process.wait(timeout=5)
                    raise PeerFailed(f"the driver exited (status {self.process.returncode}); its stderr: {self.stderr_tail()}")
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self, message: dict[str, Any] | None = None, timeout: float = 10.0) -> None:
        """Asks the driver to finish (if it still answers), then makes sure it is gone."""
        try:
            if message is not None and self.process.poll() is None:
                self.request(message, timeout)
        except PeerFailed:
            pass
        finally:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
            for stream in (self.process.stdin, self.process.stdout):
                if stream is not None:
                    stream.close()
