"""The native module's test hooks, typed for the tests.

A build with the ``test-hooks`` feature (``maturin develop --features python,test-hooks``, as
scripts/setup.sh builds .venv) has them; a release wheel has not, so ``lmcache_resp/_native.pyi``,
which describes the release module, does not declare them (py-tests/test_stubs.py checks both).
Each function here raises, saying how to build them in, where the module lacks its hook.
"""

from __future__ import annotations

from typing import Protocol, cast

from lmcache_resp import _native

__all__ = ["HOOKS", "corrupt_ring", "has_hooks", "log_flood"]

# Where each hook lives: "" for the module itself, else the class.
HOOKS: dict[str, frozenset[str]] = {
    "": frozenset({"_log_flood_for_test"}),
    "PagedStore": frozenset({"_corrupt_ring_for_test"}),
    "Connector": frozenset({"_corrupt_ring_for_test"}),
}


class _RingHooks(Protocol):
    def _corrupt_ring_for_test(self, worker: int) -> None: ...


class _LogHooks(Protocol):
    def _log_flood_for_test(self, count: int, target: str) -> float: ...


def has_hooks() -> bool:
    """Whether this build of the native module has the test hooks (every one of them)."""
    return all(
        hasattr(getattr(_native, owner) if owner else _native, name) for owner, names in HOOKS.items() for name in names
    )


def _require(owner: object, name: str) -> None:
    if not hasattr(owner, name):
        raise RuntimeError(
            f"lmcache_resp._native has no {name}: this build lacks the test-hooks feature (build it with "
            "`maturin develop --release --features python,test-hooks`, as scripts/setup.sh does)"
        )


def corrupt_ring(native: _native.PagedStore | _native.Connector, worker: int) -> None:
    """Breaks the submission ring of I/O worker ``worker`` (the engine must notice and fail)."""
    _require(native, "_corrupt_ring_for_test")
    cast(_RingHooks, native)._corrupt_ring_for_test(worker)


def log_flood(count: int, target: str) -> float:
    """Logs ``count`` records from Rust under ``target`` as fast as it can; returns the seconds
    it took."""
    _require(_native, "_log_flood_for_test")
    return cast(_LogHooks, _native)._log_flood_for_test(count, target)
