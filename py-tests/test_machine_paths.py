"""scripts/check-machine-paths.py: no tracked file holds an absolute path of a machine (a
checkout, a venv, a scratch folder or a temp file of the machine where something ran;
CONTRIBUTING.md), and the check catches what it must and lets through what it must.

The repository's own run is the one scripts/test.sh makes first; the rest runs the check on a
scratch git repository (tmp_path) holding each kind of path, as files git tracks."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "check-machine-paths.py"


def load_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_machine_paths", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


check = load_check()

# Each line holds one path the check must report, first in the line's path order.
MUST_CATCH = [
    "/work/main/.venv/bin/python -m lmcache_resp.bench --compare lmcache-l2",
    "PY=/root/venv/bin/python",
    "see /home/dev/lmcache-resp/bench/results",
    "cp out.txt /farm/run-7/out",
    "--out /scratch/u/bench",
    "PORT=$(head -1 /tmp/h38-serve.port)",
    'eps = open("/tmp/cluster.eps").read()',
    "unix:///tmp/r.sock",
    "MAIN=${MAIN:-/work/main/.venv/bin/python}",
    "python batch.py >/tmp/bbr-ab.txt 2>/dev/null",
    "weights in /mnt/data/models",
    "/Users/me/src/lmcache-resp",
    "/var/folders/xy/T/tmpab12",
    "/opt/conda/envs/lmc/bin/python",
    'File "/workspace/lmcache-resp/bench/x.py", line 3',
    "PATH=/work/venvs/sglang/bin:$PATH",
]
# Paths every machine has, relative ones, variables and placeholders: none is reported.
MUST_PASS = [
    "cd /tmp",
    'out="${TMPDIR:-/tmp}/x"',
    "$REPO/tmp/x ${OUT}/tmp/x $(pwd)/tmp/x target/tmp/x ./tmp/x ../home/x ~/.cache/pip",
    "<repo>/.venv/bin/python <scratch>/bench36-venv-before/bin/python <tmp>/lmcache-resp-redis-x/certs",
    "/etc/ssl/certs /run/lmcache-resp/bridge.sock /dev/shm/lmcache-resp-hicache /proc/self/task",
    "/usr/bin/redis-server /usr/lib/x86_64-linux-gnu /sys/class/net",
    "https://example.com/home/x/work/y /path/to/venv-with-lmcache/bin/python",
    "a bare /home/ or /tmp/ is no path of anyone's",
]


def scratch_repo(tmp_path: Path, files: dict[str, bytes | str]) -> Path:
    """A git repository in tmp_path with ``files`` tracked (added to the index)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for name, content in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            path.write_text(content)
        else:
            path.write_bytes(content)
    subprocess.run(["git", "-C", str(repo), "add", "--", *files], check=True)
    return repo


def test_no_tracked_file_holds_a_machine_path() -> None:
    hits, unused = check.scan(REPO)
    listed = "\n".join(map(str, hits))
    assert not hits, f"absolute paths of a machine in tracked files (run scripts/check-machine-paths.py for what to do):\n{listed}"
    assert not unused, f"ALLOWED entries that match nothing any more: {unused}"


def test_each_machine_path_is_caught_at_its_file_and_line(tmp_path: Path) -> None:
    lines = [line for pair in zip(MUST_PASS + [""] * len(MUST_CATCH), MUST_CATCH) for line in pair]
    repo = scratch_repo(tmp_path, {"bench/results/run.txt": "\n".join(lines) + "\n"})
    hits, _ = check.scan(repo, allowed=())
    expected = [(number, line) for number, line in enumerate(lines, start=1) if line in MUST_CATCH]
    assert [(hit.file, hit.line) for hit in hits] == [("bench/results/run.txt", number) for number, _ in expected]
    for hit, (_, line) in zip(hits, expected):
        assert hit.path in line and hit.path.startswith("/"), (hit, line)
        assert str(hit).startswith(f"bench/results/run.txt:{hit.line}: {hit.path}  | ")


def test_the_paths_every_machine_has_pass(tmp_path: Path) -> None:
    repo = scratch_repo(tmp_path, {"docs/ok.md": "\n".join(MUST_PASS) + "\n"})
    assert check.scan(repo, allowed=()) == ([], [])


def test_only_tracked_files_count_and_binary_ones_do(tmp_path: Path) -> None:
    repo = scratch_repo(tmp_path, {"bench/plot.png": b"\x89PNG\r\n\x1a\n\x00\x01/home/u/plot.py\x00\xff"})
    (repo / "untracked.log").write_text("/work/main/.venv/bin/python\n")
    hits, _ = check.scan(repo, allowed=())
    assert [(hit.file, hit.path) for hit in hits] == [("bench/plot.png", "/home/u/plot.py")]


def test_an_allowance_covers_its_files_and_path_only(tmp_path: Path) -> None:
    repo = scratch_repo(tmp_path, {
        "examples/unit.service": "ExecStart=/opt/lmcache/venv/bin/python\nExecStartPre=/opt/conda/bin/python\n",
        "docs/x.md": "/opt/lmcache/venv/bin/python\n",
    })
    example = check.Allowance("examples/*.service", r"^/opt/lmcache/venv/", "an example's install location")
    stale = check.Allowance("gone.txt", r".", "a file that is no more")
    hits, unused = check.scan(repo, allowed=(example, stale))
    assert [(hit.file, hit.line, hit.path) for hit in hits] == [
        ("docs/x.md", 1, "/opt/lmcache/venv/bin/python"),
        ("examples/unit.service", 2, "/opt/conda/bin/python"),
    ]
    assert unused == [stale]


def test_the_command_fails_naming_each_file_and_line_and_passes_here(tmp_path: Path) -> None:
    repo = scratch_repo(tmp_path, {"bench/run.sh": "#!/bin/bash\nPY=/work/main/.venv/bin/python\ncd /tmp\n"})
    failed = subprocess.run([sys.executable, str(SCRIPT), str(repo)], capture_output=True, text=True)
    assert failed.returncode == 1, failed
    assert "bench/run.sh:2: /work/main/.venv/bin/python  | PY=/work/main/.venv/bin/python\n" in failed.stdout
    assert "1 absolute path(s) of a machine in 1 tracked file(s)" in failed.stdout
    assert "placeholder of bench/RESULTS.md's preamble" in failed.stdout
    here = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True)
    assert (here.returncode, here.stdout) == (0, ""), here
