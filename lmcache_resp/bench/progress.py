"""A one-line progress bar on stderr: only on a terminal, never with --json, and only once a run
has lasted a few seconds (short runs stay quiet)."""

from __future__ import annotations

import shutil
import time
from typing import TextIO

__all__ = ["Progress"]

SHOW_AFTER_SECONDS = 2.0


class Progress:
    def __init__(self, total: int, stream: TextIO, *, enabled: bool, show_after: float = SHOW_AFTER_SECONDS) -> None:
        self.total = max(1, total)
        self.done = 0
        self.label = ""
        self._stream = stream
        self._enabled = enabled and _is_terminal(stream)
        self._show_after = show_after
        self._started = time.monotonic()
        self._drawn = False

    @classmethod
    def disabled(cls, stream: TextIO) -> Progress:
        return cls(1, stream, enabled=False)

    def add_total(self, steps: int) -> None:
        self.total += steps

    def start(self, label: str) -> None:
        """Names the step now running (redraws the bar)."""
        self.label = label
        self._draw()

    def advance(self, steps: int = 1) -> None:
        self.done = min(self.total, self.done + steps)
        self._draw()

    def clear(self) -> None:
        """Erases the bar (before other output reaches the terminal); the next step redraws it."""
        if self._drawn:
            self._stream.write("\r" + " " * _width() + "\r")
            self._stream.flush()
            self._drawn = False

    def close(self) -> None:
        self.clear()
        self._enabled = False

    def _draw(self) -> None:
        if not self._enabled or time.monotonic() - self._started < self._show_after:
            return
        width = _width()
        cells = 24
        filled = cells * self.done // self.total
        elapsed = time.monotonic() - self._started
        text = f"[{'#' * filled}{'.' * (cells - filled)}] {self.done}/{self.total} {elapsed:4.0f}s {self.label}"
        self._stream.write("\r" + text[: width - 1].ljust(width - 1))
        self._stream.flush()
        self._drawn = True


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _width() -> int:
    return max(20, shutil.get_terminal_size((80, 20)).columns)
