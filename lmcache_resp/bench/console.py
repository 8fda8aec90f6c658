"""What a run prints while it runs: report lines on stdout (none with --json), warnings on stderr,
a progress bar kept clear of both, and the units every figure is given in.

No numpy here: --help and argument errors must work without it.
"""

from __future__ import annotations

import shutil
import time
from typing import TextIO

__all__ = ["GB", "GiB", "KiB", "MiB", "UNITS_NOTE", "Console", "Progress", "format_size", "mib_to_bytes", "table_lines"]

# GB is 1e9 bytes of payload (what LMCache's benchmark reports); sizes are binary.
GB = 1e9
KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

UNITS_NOTE = (
    "units: GB = 1e9 bytes of payload (keys and protocol overhead not counted), GB/s = payload GB per "
    "second of wall time; ops/s = keys per second; chunk sizes in KiB/MiB (2^10/2^20 bytes); "
    "figures are medians over rounds"
)

# Short runs stay quiet: the bar appears only once a run has lasted this long.
SHOW_AFTER_SECONDS = 2.0


def mib_to_bytes(mib: float) -> int:
    return int(round(mib * MiB))


def format_size(nbytes: int) -> str:
    """'256 KiB', '4 MiB', '1.5 MiB', '100 B'."""
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if nbytes >= size:
            value = nbytes / size
            return f"{value:g} {unit}" if value * 100 == int(value * 100) else f"{value:.2f} {unit}"
    return f"{nbytes} B"


def table_lines(rows: list[list[str]], *, numbers_right: bool) -> list[str]:
    """Columns padded to their widest cell, a rule under the header row."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for i, row in enumerate(rows):
        cells = (cell.rjust(w) if i and numbers_right else cell.ljust(w) for cell, w in zip(row, widths))
        lines.append(("  " + " | ".join(cells)).rstrip())
        if i == 0:
            lines.append("  " + "-+-".join("-" * w for w in widths))
    return lines


class Progress:
    """A one-line bar on stderr, only on a terminal."""

    def __init__(self, total: int, stream: TextIO, *, enabled: bool, show_after: float = SHOW_AFTER_SECONDS) -> None:
        self.total = max(1, total)
        self.done = 0
        self.label = ""
        self._stream = stream
        self._enabled = enabled and _is_terminal(stream)
        self._show_after = show_after
        self._started = time.monotonic()
        self._drawn = False

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


class Console:
    def __init__(self, stdout: TextIO, stderr: TextIO, *, json_mode: bool) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self.json_mode = json_mode
        # Never with --json: whoever reads that output is a program, not a person.
        self.progress = Progress(0, stderr, enabled=not json_mode)

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
