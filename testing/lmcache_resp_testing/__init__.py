"""The test suites' support package: fixtures that only the tests use, kept out of the wheel.

The throwaway servers, clusters and Sentinel groups are the launcher's
(``lmcache_resp_servers``, beside lmcache_resp in the wheel, which the benchmark starts its own
with); the suites import its classes as they are. Here is what only tests add:

- :mod:`lmcache_resp_testing.servers`: ACL users, faults (pause, resume), independent redis-py
  clients, as functions on the launcher's servers.
- :mod:`lmcache_resp_testing.certs`: the test certificates, bad ones included (expired, wrong
  host, an untrusted CA's client, an encrypted key).
- ``python -m lmcache_resp_testing``: the command line the Rust tests (native-tests) and the
  scripts start servers, clusters and certificates with (:mod:`lmcache_resp_testing.cli`).
- :mod:`lmcache_resp_testing.hooks`: the native module's test hooks, typed (the ``test-hooks``
  feature; release builds lack them, and ``_native.pyi`` declares the release module).
- :func:`pattern`: deterministic test bytes.

It lives in the repository only (testing/), never in the wheel (scripts/check-wheel.sh fails on
it). The command line and what it imports (cli, certs, servers) need the standard library and
``lmcache_resp_servers`` only, not lmcache_resp: any Python 3.10+ runs it, with the repository
root on its path, before anything is built (the Rust tests do). The suites find it on their
path: py-tests and lmcache-tests through pytest's ``pythonpath`` (pyproject.toml), the Rust
tests through ``PYTHONPATH`` (native-tests' ``launcher()``).
"""

from __future__ import annotations

import random

__all__ = ["pattern"]


def pattern(length: int, seed: int) -> bytes:
    """Deterministic, non-repeating test bytes."""
    return random.Random(seed).randbytes(length)
