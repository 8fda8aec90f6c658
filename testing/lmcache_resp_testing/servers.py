"""What only tests do with the throwaway servers. The servers, clusters and Sentinel groups
themselves are the launcher's (``lmcache_resp_servers``, which the benchmark ships and the
suites import as it is); this module adds, as functions on them:

- acl_user_line: an ACL user with full rights, as a config line for ``RedisServer(conf=...)``;
- pause, resume: faults (SIGSTOP, SIGCONT: connections stay open, nothing is answered);
- redis_py: an independent client (redis-py) of a server or of one cluster node, to check what
  it holds: over TLS to a TLS server, checking its certificate unless it presents another pair
  than ``certs.server_cert`` on purpose.

The test certificates, bad ones included, are :mod:`lmcache_resp_testing.certs`'.

Secrets never go onto a command line, where ``ps`` shows them: passwords go into the config
files and the REDISCLI_AUTH of redis-cli's environment.
"""

from __future__ import annotations

import importlib
import os
import signal
from typing import Any

from lmcache_resp_servers import EXIT_USAGE, ClusterNode, LaunchError, RedisCluster, RedisServer
from lmcache_resp_servers.config import quoted

__all__ = ["acl_user_line", "pause", "redis_py", "resume"]


def acl_user_line(name: str, password: str) -> str:
    """``user NAME on >PASSWORD ~* &* +@all``: a user with every right, for a server's config
    file (never a command line)."""
    if not name or any(c.isspace() for c in name):
        raise LaunchError(f"ACL user name {name!r} is empty or has spaces", EXIT_USAGE)
    return f"user {name} on {quoted('>' + password)} ~* &* +@all"


def pause(server: RedisServer) -> None:
    """Freezes the server (SIGSTOP): connections stay open, nothing is answered."""
    os.kill(server.pid, signal.SIGSTOP)


def resume(server: RedisServer) -> None:
    os.kill(server.pid, signal.SIGCONT)


def redis_py(server: RedisServer | RedisCluster, node: ClusterNode | None = None, *, db: int = 0) -> Any:
    """An independent client (redis-py, imported only here) of ``server``, or, for a cluster, a
    plain (non-cluster) client of its ``node``: over TLS to a TLS server, checking its
    certificate unless it presents another pair than ``certs.server_cert`` on purpose."""
    redis = importlib.import_module("redis")
    tls = server.tls_kwargs()
    if isinstance(server, RedisCluster):
        if node is None:
            raise TypeError("redis_py(cluster, node): which node of the cluster")
        return redis.Redis(host=node.host, port=node.port, password=server.password, db=db, **tls)
    if tls and not server.options.presents_own_cert:
        tls.update(ssl_cert_reqs="none", ssl_check_hostname=False)
    return redis.Redis(host=server.host, port=server.port, password=server.password, db=db, **tls)
