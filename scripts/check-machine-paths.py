#!/usr/bin/env python3
"""No absolute path of a machine in a tracked file (CONTRIBUTING.md, "No path of your machine").

A checkout, a venv, a scratch folder or a temp file of the machine where something ran says
nothing about the project, and nobody else can rerun it. Scripts take their paths from their
arguments, the environment or the repository root (temp files from mktemp); raw outputs kept as
evidence replace them with the placeholders bench/RESULTS.md's preamble lists (<repo>, <scratch>,
...).

    scripts/check-machine-paths.py [REPO]     exit 1, one line per hit: FILE:LINE: PATH  | the line

What counts: an absolute path under a root that only a machine has (ROOTS below: the workspace,
home folders, mounts, /opt, macOS's per-user folders), or a named entry of /tmp (/tmp itself, the
system's temp folder, is fine). A path is absolute where nothing that continues a word, a relative
path or a variable comes right before its slash: `$REPO/tmp/x`, `${TMPDIR}/x` and `target/tmp/x`
are not; the path of a `unix:` URL is. What every machine has (/etc, /run, /proc, /sys, /dev/shm,
/usr) is not a machine's path. Every tracked file is read, text or not (a binary file can hold a path too).
ALLOWED lists the exceptions, each with its reason; an entry that no longer matches anything fails
the check as well, so the list stays short.

Standard library only: scripts/test.sh runs it first, before anything is built.
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# Roots only a machine has. "tmp" counts only with a name after it (see PATH).
ROOTS = (
    "work", "workspace", "root", "home", "farm", "scratch", "mnt", "media", "opt", "Users",
    "var/folders", "private/var", "nix/store", "tmp",
)
# Before the slash: not a character that continues a word, a relative path (., ~) or a variable
# ($X, ${X}, $(cmd)). A placeholder before it (<repo>/...) is checked apart (PLACEHOLDER_BEFORE):
# `>` also ends a shell redirection, and a redirection into a /tmp file names a path. After the
# root: a name (or a variable in one); the path runs to a space, a quote or a bracket.
PATH = re.compile(
    r"(?<![\w.$}~)])/(?:" + "|".join(re.escape(root) for root in ROOTS) + r")/"
    r"[\w.$*{@%+-][^\s'\"`)\]},;:|<>\x00-\x1f\x7f]*"
)
PLACEHOLDER_BEFORE = re.compile(r"<[\w. -]+>$")


@dataclass(frozen=True)
class Allowance:
    """Hits in files matching ``files`` (a glob) whose path matches ``path`` (a regex) are fine."""

    files: str
    path: str
    reason: str


EXAMPLE_VENV = r"^/opt/lmcache/venv/"
ALLOWED = (
    Allowance("examples/bridge/lmcache-resp-bridge.service", EXAMPLE_VENV,
              "an example systemd unit: where the example installs the package, for the reader to change"),
    Allowance("scripts/check-machine-paths.py", EXAMPLE_VENV, "the entry above, which names that path"),
    Allowance("py-tests/test_machine_paths.py", r".",
              "this check's own test: the paths it must catch, written into a scratch repository"),
)


@dataclass(frozen=True)
class Hit:
    file: str
    line: int
    path: str
    text: str

    def __str__(self) -> str:
        text = self.text.strip()
        return f"{self.file}:{self.line}: {self.path}  | {text[:160] + ('...' if len(text) > 160 else '')}"


def tracked_files(repo: Path) -> list[str]:
    listed = subprocess.run(["git", "-C", str(repo), "ls-files", "-z"], capture_output=True)
    if listed.returncode != 0:
        raise SystemExit(f"scripts/check-machine-paths.py: {repo} is not a git checkout "
                         f"(git ls-files: {listed.stderr.decode(errors='replace').strip()})")
    return [name for name in listed.stdout.decode("utf-8", "surrogateescape").split("\0") if name]


def scan(repo: Path, allowed: tuple[Allowance, ...] = ALLOWED) -> tuple[list[Hit], list[Allowance]]:
    """Every machine path in the files git tracks under ``repo`` that no allowance covers, and
    the allowances that covered nothing."""
    hits: list[Hit] = []
    used: set[Allowance] = set()
    for name in tracked_files(repo):
        file = repo / name
        if not file.is_file() or file.is_symlink():  # a submodule, a link, or deleted in the work tree
            continue
        text = file.read_bytes().decode("latin-1")  # every byte maps to one character: no file fails
        for number, line in enumerate(text.split("\n"), start=1):
            for match in PATH.finditer(line):
                if PLACEHOLDER_BEFORE.search(line, 0, match.start()):
                    continue
                path = match.group(0)
                allowance = next(
                    (a for a in allowed if fnmatch.fnmatchcase(name, a.files) and re.search(a.path, path)), None
                )
                if allowance is None:
                    hits.append(Hit(name, number, path, line))
                else:
                    used.add(allowance)
    return hits, [a for a in allowed if a not in used]


def main(argv: list[str]) -> int:
    repo = Path(argv[1] if len(argv) > 1 else Path(__file__).resolve().parents[1])
    hits, unused = scan(repo)
    for hit in hits:
        print(hit)
    for allowance in unused:
        print(f"scripts/check-machine-paths.py: ALLOWED's entry for {allowance.files} ({allowance.path}) "
              "matches nothing any more: remove it")
    if hits:
        files = sorted({hit.file for hit in hits})
        print(
            f"\n{len(hits)} absolute path(s) of a machine in {len(files)} tracked file(s), above. Take a script's paths "
            "from its arguments, the environment or the repository root (cd \"$(dirname \"$0\")/..\"; mktemp for temp "
            "files); in a raw output kept as evidence, replace each with a placeholder of bench/RESULTS.md's preamble "
            "(<repo>, <scratch>, <tmp>, ...). A path that every machine has belongs in ALLOWED of "
            "scripts/check-machine-paths.py, with its reason."
        )
    return 1 if hits or unused else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
