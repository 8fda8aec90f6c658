"""The throwaway Redis (or Valkey) servers that ``python -m lmcache_resp.bench`` starts: free
ports on 127.0.0.1, a temp dir, no persistence. The benchmark's own machinery, not API; the test
suites' launchers (testing/lmcache_resp_testing in the repository, never shipped) build on it.
Only the standard library. One job per module, each importing only those above it:

- errors: LaunchError and the exit statuses; ports: free ports; binaries: which server binary
  (``--server``), its cli and its ``--version``;
- wire: one command over a raw socket; replication: waiting for replicas to catch up;
- certs: a CA and a server certificate for TLS; config: a server's config file; memory: the
  memory regime (a server that keeps what it frees);
- processes: starting, waiting for and killing a server process; server: RedisServer;
- watcher: ends a cluster whose owner is gone (run by path, standard library only); cluster:
  RedisCluster; sentinel: SentinelGroup.
"""
