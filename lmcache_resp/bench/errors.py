"""The benchmark's failures and the exit statuses they end in.

Exit status: 0 when every byte read back was verified, 1 when verification failed, 2 for a
configuration or environment problem, 130 when interrupted.
"""

from __future__ import annotations

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "BenchError", "PeerFailed"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class BenchError(Exception):
    """Something the user can fix: a configuration that does not fit, a missing tool, an
    unreachable server. Printed, and the exit status is 2."""


class PeerFailed(Exception):
    """A peer hung or failed: the comparison reports it and goes on without that peer."""
