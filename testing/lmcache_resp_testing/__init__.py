"""The test suites' support package: fixtures that only the tests use, kept out of the wheel.

- :mod:`lmcache_resp_testing.servers`: throwaway servers, clusters and Sentinel groups for the
  suites, built on the benchmark's launchers (``lmcache_resp.bench.servers``), with what only
  tests need: passwords and ACL users, mutual TLS, servers that present a bad certificate on
  purpose, TLS clusters and Sentinels, fault injection (pause, resume, restart, a node killed),
  independent clients.
- :mod:`lmcache_resp_testing.certs`: the test certificates, bad ones included (expired, wrong
  host, an untrusted CA's client, an encrypted key).
- ``python -m lmcache_resp_testing``: the command line the Rust tests (native-tests) and the
  scripts start servers, clusters and certificates with (:mod:`lmcache_resp_testing.cli`).
- :mod:`lmcache_resp_testing.hooks`: the native module's test hooks, typed (the ``test-hooks``
  feature; release builds lack them, and ``_native.pyi`` declares the release module).
- :func:`pattern`: deterministic test bytes.

It lives in the repository only (testing/), never in the wheel (scripts/check-wheel.sh fails on
it), and it imports lmcache_resp, so the Python running it must have lmcache_resp built
(scripts/setup.sh: .venv). The suites find it on their path: py-tests and lmcache-tests through
pytest's ``pythonpath`` (pyproject.toml), the Rust tests through ``PYTHONPATH`` (native-tests'
``launcher()``).
"""

from __future__ import annotations

import random

__all__ = ["pattern"]


def pattern(length: int, seed: int) -> bytes:
    """Deterministic, non-repeating test bytes."""
    return random.Random(seed).randbytes(length)
