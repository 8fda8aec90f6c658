"""Human-readable lines on stdout (none with --json), kept clear of the progress bar."""

from __future__ import annotations

from typing import TextIO

from lmcache_resp.bench.progress import Progress

__all__ = ["Console"]


class Console:
    def __init__(self, stdout: TextIO, stderr: TextIO, *, json_mode: bool) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self.json_mode = json_mode
        self.progress = Progress.disabled(stderr)

    def say(self, text: str = "") -> None:
        """A line of the human-readable report (suppressed with --json: stdout is JSON only)."""
        if self.json_mode:
            return
        self.progress.clear()
        print(text, file=self.stdout, flush=True)

    def warn(self, text: str) -> None:
        """A line on stderr, also with --json."""
        self.progress.clear()
        print(text, file=self.stderr, flush=True)
