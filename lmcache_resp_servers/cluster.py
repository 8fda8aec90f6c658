"""A throwaway Redis Cluster (RedisCluster, start_cluster): PRIMARIES * (1 + N) servers on
127.0.0.1, ports P, P+1, ... (each also uses port+10000 for the cluster bus; free ones are picked
in ports.CLUSTER_PORTS), joined with ``redis-cli --cluster create`` and waited for until every
node reports cluster_state:ok, all 16384 slots assigned and ok, every node known to every other,
and every replica's link to its primary up. DIR/pids holds "PORT PID" per server, primaries
first; DIR/server and DIR/cli name the binaries. With an owner, a watcher process
(:mod:`~lmcache_resp_servers.watcher`) ends the servers once the owner is gone.

Every node is configured alike (a ServerConfig): with TLS, a node also speaks it on its bus and
replication links (``tls-cluster yes``, ``tls-replication yes``). The benchmark's ``--cluster``,
the test suites and their command line (``python -m lmcache_resp_testing cluster start``) start
clusters through this module.
"""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import ssl
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmcache_resp_servers import processes, watcher, wire
from lmcache_resp_servers.binaries import cli_binary
from lmcache_resp_servers.certs import ServerCerts, certs_for
from lmcache_resp_servers.config import ServerConfig
from lmcache_resp_servers.errors import EXIT_FAILED, EXIT_PORT_TAKEN, EXIT_USAGE, LaunchError
from lmcache_resp_servers.memory import check_keeps_freed_memory, keep_freed_memory_env
from lmcache_resp_servers.ports import BUS_OFFSET, HOST, RESERVED_PORT, free_cluster_base
from lmcache_resp_servers.server import server_url, tls_kwargs

__all__ = [
    "SLOTS",
    "ClusterNode",
    "RedisCluster",
    "StartedCluster",
    "cli_file",
    "start_cluster",
    "start_cluster_on_free_ports",
    "stop_cluster",
]

SLOTS = 16384


@dataclass(frozen=True)
class ClusterNode:
    host: str
    port: int
    pid: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def cli_file(directory: Path) -> Path:
    """Names the redis-cli the cluster in ``directory`` was created with (one with TLS for a TLS
    cluster), for harnesses that run it by path."""
    return directory / "cli"


def stop_cluster(directory: Path) -> None:
    """SIGKILL the servers of the cluster in ``directory`` (DIR/pids), then wait until they have
    exited: callers reuse the ports right away."""
    try:
        watcher.kill_servers(directory)
    except TimeoutError as exc:
        raise LaunchError(str(exc)) from None


def _cluster_ready(ports: list[int], primaries: int, password: str | None, tls: ssl.SSLContext | None = None) -> bool:
    want = {"cluster_state": "ok", "cluster_slots_assigned": str(SLOTS), "cluster_slots_ok": str(SLOTS),
            "cluster_known_nodes": str(len(ports))}
    try:
        for port in ports:
            info = wire.info(port, "CLUSTER", "INFO", password=password, tls=tls)
            if any(info.get(field) != value for field, value in want.items()):
                return False
        for port in ports[primaries:]:
            if wire.info(port, "INFO", "replication", password=password, tls=tls).get("master_link_status") != "up":
                return False
        # Every node must also know every replica as one (gossip lags the replication link), or
        # a client's first CLUSTER SHARDS on the seed may list a shard without its replica.
        replica_count = len(ports) - primaries
        for port in ports:
            nodes = wire.command(port, "CLUSTER", "NODES", password=password, tls=tls)
            lines = nodes.decode().splitlines() if isinstance(nodes, bytes) else []
            if sum(1 for line in lines if "slave" in line.split()[2].split(",")) != replica_count:
                return False
    except (OSError, ValueError, wire.ReplyError):
        return False
    return True


@dataclass
class StartedCluster:
    """The servers start_cluster started (primaries first), and its watcher."""

    nodes: list[ClusterNode]
    processes: list[subprocess.Popen[bytes]]
    watcher: subprocess.Popen[bytes] | None

    def kill(self) -> None:
        """Every server and the watcher, reaped; the caller's own children, so no pid is reused."""
        for process in self.processes:
            processes.kill(process)
        if self.watcher is not None:
            processes.kill(self.watcher)


def start_cluster(
    directory: Path,
    base_port: int,
    primaries: int,
    replicas: int = 0,
    *,
    node: ServerConfig,
    binary: str,
    cli: str,
    owner: int | None = None,
    keep_freed_memory: bool = False,
) -> StartedCluster:
    """The cluster in the module docstring, on ports ``base_port``...; on failure every
    server is stopped and LaunchError says why (exit_code 98: a port was taken). ``node``: every
    node's configuration but its directory and port (``cluster_node_timeout_ms`` set): its
    password, I/O threads, TLS (``cli`` must speak TLS then: ``cli_binary(binary, tls=True)``).
    ``keep_freed_memory``: every node keeps what it frees. ``owner``: a watcher stops the
    cluster once that process is gone."""
    if node.cluster_node_timeout_ms is None:
        raise LaunchError("a cluster node needs cluster_node_timeout_ms", EXIT_USAGE)
    if primaries < 3:
        raise LaunchError("a cluster needs at least 3 primaries (`--cluster create` refuses fewer)", EXIT_USAGE)
    if replicas < 0:
        raise LaunchError("replicas must be 0 or more", EXIT_USAGE)
    total = primaries * (1 + replicas)
    last = base_port + total - 1
    if base_port < 1024 or last + BUS_OFFSET > 65535:
        raise LaunchError(f"ports {base_port}..{last} and their bus ports (+{BUS_OFFSET}) must lie in 1024..65535", EXIT_USAGE)
    if base_port <= RESERVED_PORT <= last:
        raise LaunchError(f"refusing to use port {RESERVED_PORT}: a developer's own redis may live there", EXIT_USAGE)

    allocator = keep_freed_memory_env(binary) if keep_freed_memory else {}
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    # A rerun in the same DIR replaces the cluster, rather than orphaning servers the pid file named.
    stop_cluster(directory)
    watcher.server_file(directory).write_text(binary + "\n")
    cli_file(directory).write_text(cli + "\n")
    pid_file = directory / "pids"
    pid_file.write_text("")
    started = StartedCluster([], [], None)
    configs: list[ServerConfig] = []

    def fail(message: str, code: int = EXIT_FAILED) -> LaunchError:
        started.kill()
        return LaunchError(message, code)

    for port in range(base_port, last + 1):
        node_dir = directory / str(port)
        node_dir.mkdir(mode=0o700, exist_ok=True)
        for stale in ("nodes.conf", "redis.log", "stderr.log"):
            (node_dir / stale).unlink(missing_ok=True)
        config = dataclasses.replace(node, directory=node_dir, port=port)
        # A session of its own: the owner's Ctrl-C is the watcher's to act on, not the servers'.
        process = processes.spawn(binary, config, own_session=True, allocator=allocator)
        with pid_file.open("a") as pids:
            pids.write(f"{port} {process.pid}\n")
        started.nodes.append(ClusterNode(HOST, port, process.pid))
        started.processes.append(process)
        configs.append(config)

    deadline = time.monotonic() + 10
    for process, config in zip(started.processes, configs):
        try:
            processes.wait_answering(process, config, deadline)
            if keep_freed_memory:
                check_keeps_freed_memory(process.pid, config, allocator)
        except LaunchError:
            # As raised: a TlsUnsupported stays one.
            started.kill()
            raise

    # Only now that every server runs its binary can the watcher recognize them.
    if owner is not None:
        started.watcher = watcher.start_watcher(directory, owner, processes.env_without_secrets())

    password = node.password
    env = processes.env_without_secrets()
    if password is not None:
        env.update(dict.fromkeys(processes.CLI_AUTH_ENV, password))
    addresses = [node.address for node in started.nodes]
    create = subprocess.run(
        [cli, "--no-auth-warning", *(node.tls.cli_args() if node.tls is not None else []), "--cluster", "create",
         *addresses, "--cluster-replicas", str(replicas), "--cluster-yes"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, check=False,
    )
    if create.returncode != 0:
        raise fail(f"{os.path.basename(cli)} --cluster create failed:\n{create.stdout}{create.stderr}")

    # `--cluster create` makes the first PRIMARIES addresses the primaries. Checked, not assumed:
    # callers rely on the pid file's order.
    ports = [started_node.port for started_node in started.nodes]
    context = configs[0].client_context()
    for i, port in enumerate(ports):
        want = "master" if i < primaries else "slave"
        try:
            role = wire.role(port, password, context)
        except (OSError, ValueError, wire.ReplyError) as exc:
            raise fail(f"ROLE failed on node {port}: {exc}") from None
        if role != want:
            raise fail(f"node {port} is a {role}, expected a {want}")

    deadline = time.monotonic() + 20
    while not _cluster_ready(ports, primaries, password, context):
        if time.monotonic() > deadline:
            raise fail(f"the cluster on ports {base_port}..{last} did not become ready within 20 s")
        time.sleep(0.1)
    return started


def start_cluster_on_free_ports(
    directory: Path, primaries: int, replicas: int = 0, **options: Any
) -> StartedCluster:
    """start_cluster on ports picked free, again on others if one is taken before a server binds it."""
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for attempt in range(6):
        base = free_cluster_base(primaries * (1 + replicas), rng)
        try:
            return start_cluster(directory, base, primaries, replicas, **options)
        except LaunchError as exc:
            if exc.exit_code != EXIT_PORT_TAKEN or attempt == 5:
                raise
    raise AssertionError("unreachable")


class RedisCluster(processes.Throwaway):
    """A throwaway local Redis Cluster on 127.0.0.1, started on construction: ``primaries``
    primaries with ``replicas`` replicas each, no persistence, a short node timeout (1 s by
    default). Its servers die with :meth:`stop`, or, through a watcher process, when this process
    dies. ``password`` (requirepass and masterauth on every node), ``keep_freed_memory`` and
    ``io_threads`` as for RedisServer. TLS: ``tls=True`` (certificates made in DIR/certs) or
    ``tls=certs`` (a ServerCerts): every node TLS only, on its bus and replication links too,
    ``.certs`` those, ``.seed_url`` a ``rediss://`` one; ``tls_auth_clients`` as for
    RedisServer."""

    certs: ServerCerts | None

    def __init__(
        self,
        directory: Path | str | None = None,
        primaries: int = 3,
        replicas: int = 0,
        password: str | None = None,
        *,
        server: str | None = None,
        cli: str | None = None,
        io_threads: int | None = None,
        node_timeout_ms: int = 1000,
        tls: bool | ServerCerts = False,
        tls_auth_clients: str = "no",
        keep_freed_memory: bool = False,
    ) -> None:
        super().__init__(server, directory, "lmcache-resp-cluster-")
        self.password = password
        self.keep_freed_memory = keep_freed_memory
        self.io_threads = io_threads
        self.node_timeout_ms = node_timeout_ms
        self.tls_auth_clients = tls_auth_clients
        try:
            self.certs = certs_for(tls, self.directory / "certs")
            # Every node's configuration but its directory and port (start_cluster's ``node``).
            node = ServerConfig(self.directory, 0, password=password, io_threads=io_threads,
                                cluster_node_timeout_ms=node_timeout_ms, tls=self.certs,
                                tls_auth_clients=tls_auth_clients)
            self.cli_binary = cli or cli_binary(self.binary, tls=node.tls is not None)
            started = start_cluster_on_free_ports(
                self.directory, primaries, replicas, node=node, binary=self.binary, cli=self.cli_binary,
                owner=os.getpid(), keep_freed_memory=self.keep_freed_memory,
            )
        except BaseException:
            self._remove_temp_dir()
            raise
        self._started = started
        self.nodes = started.nodes

    @property
    def endpoints(self) -> list[str]:
        return [node.address for node in self.nodes]

    @property
    def seed_url(self) -> str:
        """A URL for the first node, from which clients discover the rest: ``rediss://`` for a
        TLS cluster (the CA etc.: :meth:`tls_kwargs`)."""
        seed = self.nodes[0]
        return server_url("redis", seed.address, self.password, self.certs is not None)

    def tls_kwargs(self, client_cert: bool | None = None) -> dict[str, Any]:
        """As RedisServer.tls_kwargs: redis-py's names for reaching this TLS cluster ({} if plaintext)."""
        return tls_kwargs(self.certs, self.tls_auth_clients, client_cert)

    def client_context(self, client_cert: bool = True) -> ssl.SSLContext | None:
        """A stdlib TLS context for the nodes (None: plaintext), as :func:`wire.command` takes it."""
        return None if self.certs is None else self.certs.client_context(client_cert=client_cert)

    def command(self, node: ClusterNode, *args: str) -> object:
        """One command to one node over a raw socket (TLS for a TLS cluster); its reply (error
        replies raise)."""
        return wire.command(node.port, *args, password=self.password, host=node.host, tls=self.client_context())

    def primaries(self) -> list[ClusterNode]:
        """Live nodes that call themselves primaries now (ROLE), in node order."""
        return self._live_with_role("master")

    def replicas(self) -> list[ClusterNode]:
        """Live nodes that call themselves replicas now (ROLE), in node order."""
        return self._live_with_role("slave")

    def _live_with_role(self, role: str) -> list[ClusterNode]:
        context = self.client_context()
        return [
            node for node in self.nodes
            if not watcher.exited(node.pid) and wire.role(node.port, self.password, context) == role
        ]

    def kill(self, node: ClusterNode) -> None:
        """SIGKILL one node, as in a crash; returns once it is gone (its process reaped)."""
        os.kill(node.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while not watcher.exited(node.pid):
            if time.monotonic() > deadline:
                raise LaunchError(f"node {node.port} (pid {node.pid}) did not die")
            time.sleep(0.01)
        self._started.processes[self.nodes.index(node)].wait()

    def cli(self, *args: str) -> str:
        """redis-cli -c (follows redirects like a cluster client) against the first node; its
        stdout. The password travels in the environment, never on the command line."""
        seed = self.nodes[0]
        env = processes.env_without_secrets()
        if self.password:
            env.update(dict.fromkeys(processes.CLI_AUTH_ENV, self.password))
        tls = self.certs.cli_args() if self.certs is not None else []
        result = subprocess.run(
            [self.cli_binary, "-c", *tls, "-h", seed.host, "-p", str(seed.port), *args],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, check=True,
        )
        return result.stdout

    def stop(self) -> None:
        """Kills every server, waits until they are gone, and removes the temp dir it made."""
        self._started.kill()
        super().stop()
