"""Throwaway Redis (or Valkey) servers: free ports on 127.0.0.1, a temp dir, no persistence. A
package of its own, beside lmcache_resp in the wheel, that imports only the standard library
(nothing of lmcache_resp, no compiled module), so that whatever starts servers needs no build.

Who runs what:

- users: ``python -m lmcache_resp.bench`` starts its throwaway servers here (one server, as
  ``--server``, ``--tls``, ``--unix`` and ``--regime`` say; ``--shards``; ``--cluster`` with
  ``--replicas``; the server ``--dead-server`` kills; ``--sentinel-failover``'s group), and
  stops them when the run ends. That is what the wheel ships this package for; it is not
  lmcache_resp's API.
- the test suites (repository only): py-tests, lmcache-tests and sglang-tests start the same
  classes with what tests ask for beside (passwords, mutual TLS, a certificate presented on
  purpose, a killed cluster node), and the Rust tests through the test-support package's
  command line (``python -m lmcache_resp_testing``, testing/ in the repository), which any
  Python 3.10+ runs with this package on its path. What only tests do (bad certificates, ACL
  users, SIGSTOP, redis-py clients) is the test-support package's, not this one's.

One class per kind: RedisServer, RedisCluster, SentinelGroup; every option a constructor
argument. One job per module, each importing only those above it:

- errors: LaunchError and the exit statuses; ports: free ports; binaries: which server binary
  (``--server``, $REDIS_TEST_SERVER), its cli and its ``--version``;
- wire: one command over a raw socket; replication: waiting for replicas to catch up;
- certs: a CA and a server certificate for TLS; config: a server's config file; memory: the
  memory regime (a server that keeps what it frees);
- processes: starting, waiting for and killing a server process, whether a binary has TLS;
  server: RedisServer;
- watcher: ends a cluster whose owner is gone (run by path, standard library only); cluster:
  RedisCluster; sentinel: SentinelGroup.
"""

from lmcache_resp_servers.binaries import SERVER_ENV, cli_binary, server_binary, server_malloc, server_version
from lmcache_resp_servers.certs import ServerCerts, make_server_certs
from lmcache_resp_servers.cluster import ClusterNode, RedisCluster
from lmcache_resp_servers.config import TLS_AUTH_CLIENTS, ServerConfig
from lmcache_resp_servers.errors import (
    EXIT_FAILED,
    EXIT_MISSING,
    EXIT_OK,
    EXIT_PORT_TAKEN,
    EXIT_USAGE,
    LaunchError,
    SentinelUnsupported,
    TlsUnsupported,
)
from lmcache_resp_servers.memory import KEEP_FREED_MALLOC_CONF
from lmcache_resp_servers.ports import CLUSTER_PORTS, HOST, free_port
from lmcache_resp_servers.processes import server_supports_tls
from lmcache_resp_servers.replication import wait_for_replicas
from lmcache_resp_servers.sentinel import SentinelGroup
from lmcache_resp_servers.server import RedisServer
from lmcache_resp_servers.wire import ReplyError, command

__all__ = [
    "CLUSTER_PORTS",
    "EXIT_FAILED",
    "EXIT_MISSING",
    "EXIT_OK",
    "EXIT_PORT_TAKEN",
    "EXIT_USAGE",
    "HOST",
    "KEEP_FREED_MALLOC_CONF",
    "SERVER_ENV",
    "TLS_AUTH_CLIENTS",
    "ClusterNode",
    "LaunchError",
    "RedisCluster",
    "RedisServer",
    "ReplyError",
    "SentinelGroup",
    "SentinelUnsupported",
    "ServerCerts",
    "ServerConfig",
    "TlsUnsupported",
    "cli_binary",
    "command",
    "free_port",
    "make_server_certs",
    "server_binary",
    "server_malloc",
    "server_supports_tls",
    "server_version",
    "wait_for_replicas",
]
