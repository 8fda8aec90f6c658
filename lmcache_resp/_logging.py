"""The Rust core's log records, into Python's ``logging``.

The core logs through Rust's ``log`` facade with targets like ``lmcache_resp::engine``; its
records are queued without the GIL (a bounded queue: when it is full they are dropped and
counted). One daemon thread takes them, waiting with the GIL released, and emits each
through ``logging.getLogger(target.replace("::", "."))`` at its level, with the Rust
thread's name as ``threadName``. Dropped records are reported as a WARNING on
``lmcache_resp.logging``. The core formats only records at or above the lowest level any
``lmcache_resp`` logger emits (re-read on every wake-up, at least every half second, and by
:func:`refresh_level`). See docs/observability.md.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading

from lmcache_resp import _native

__all__ = ["adopt_lmcache_logging", "flush", "refresh_level", "start"]

_LOGGER = "lmcache_resp"
_WAIT = 0.5

_emit_lock = threading.Lock()
_thread: threading.Thread | None = None
_stop = threading.Event()


def _min_level() -> int:
    """The lowest level a record of the core's could be emitted at."""
    manager = logging.Logger.manager
    levels = [logging.getLogger(_LOGGER).getEffectiveLevel()]
    for name, logger in list(manager.loggerDict.items()):
        if name.startswith(_LOGGER + ".") and isinstance(logger, logging.Logger) and not logger.disabled:
            levels.append(logger.getEffectiveLevel())
    if logging.root.manager.disable:
        levels = [max(level, logging.root.manager.disable + 1) for level in levels]
    return min(levels)


def adopt_lmcache_logging() -> None:
    """Inside LMCache, our records go where LMCache's go: LMCache gives each of its loggers its
    own handler (format, ``LMCACHE_LOG_LEVEL``) and stops propagation, so a plugin's records
    would otherwise reach no handler, and INFO (the settings line) would be lost. Done once,
    only when LMCache is loaded and nobody configured ``lmcache_resp`` or the root logger."""
    import sys

    ours = logging.getLogger(_LOGGER)
    if "lmcache" not in sys.modules or ours.handlers or logging.getLogger().handlers:
        return
    try:
        from lmcache.logging import init_logger  # type: ignore[import-not-found]
    except ImportError:
        return
    init_logger(_LOGGER)
    refresh_level()


def refresh_level() -> None:
    """Tells the core the level its records are wanted at (after changing a logger's level)."""
    _native._log_set_level(_min_level())


def _logger_name(target: str) -> str:
    name = target.replace("::", ".")
    if name.startswith("lmcache_resp_core"):
        name = _LOGGER + name[len("lmcache_resp_core"):]
    return name if name.startswith(_LOGGER) else f"{_LOGGER}.{name}"


def _emit(records: list[tuple[int, str, str, str, str | None, int | None, float]], dropped: int) -> None:
    for level, target, message, thread, file, line, created in records:
        logger = logging.getLogger(_logger_name(target))
        if not logger.isEnabledFor(level):
            continue
        record = logger.makeRecord(logger.name, level, file or "(rust)", line or 0, message, (), None)
        record.created = created
        record.msecs = (created - int(created)) * 1000
        record.relativeCreated = (created - logging._startTime) * 1000  # type: ignore[attr-defined]
        if thread:
            record.threadName = thread
        logger.handle(record)
    if dropped:
        logging.getLogger(f"{_LOGGER}.logging").warning(
            "%d log records of the core were dropped: its queue (%d records) was full", dropped,
            _native.LOG_QUEUE_CAPACITY,
        )


def _run() -> None:
    while not _stop.is_set():
        try:
            refresh_level()
            if _native._log_wait(_WAIT):
                # Taken under the lock, so that flush() never misses records taken here.
                with _emit_lock:
                    records, dropped = _native._log_take(0.0)
                    _emit(records, dropped)
        except Exception:  # a handler's fault must not end the forwarding
            logging.getLogger(f"{_LOGGER}.logging").exception("forwarding the core's log records failed")


def flush() -> None:
    """Emits every record queued now, on this thread (before exit, and in tests)."""
    refresh_level()
    with _emit_lock:
        records, dropped = _native._log_take(0.0)
        _emit(records, dropped)


def start() -> None:
    """Starts the forwarding thread (once per process; again in a forked child)."""
    global _thread
    if _thread is not None and _thread.is_alive():
        return
    _stop.clear()
    _native._log_reopen()
    refresh_level()
    _thread = threading.Thread(target=_run, name="lmcache-resp-log", daemon=True)
    _thread.start()


def _stop_at_exit() -> None:
    _stop.set()
    _native._log_close()
    if _thread is not None:
        _thread.join(timeout=2.0)
    flush()


def _after_fork() -> None:
    global _thread, _emit_lock
    _thread = None
    _emit_lock = threading.Lock()
    start()


atexit.register(_stop_at_exit)
os.register_at_fork(after_in_child=_after_fork)
