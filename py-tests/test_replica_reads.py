"""Reads from cluster replicas (``read_from="prefer_replica"``), against real clusters with a
replica per primary: the replicas serve GETs (counted by each node's own INFO commandstats), writes
stay on the primaries, a replica killed mid-read costs no wrong byte and no stuck key, and a
replica cut off from its primary (stale) and then re-attached never yields bytes of a mix of
values. The routing choice itself is unit-tested in rust/src/cluster/read_pick.rs."""

from __future__ import annotations

import hashlib
import threading
import time
import types

import pytest
from conftest import RedisCluster
from lmcache_resp_servers import SentinelGroup, SentinelUnsupported

from lmcache_resp import PagedRespStore, PartialReadError, RespSettings
from lmcache_resp_servers import wait_for_replicas, wire
from lmcache_resp.lmcache.non_mp import settings_from_lmcache_config

PAGE = 64 << 10


def content_key(value: bytes) -> str:
    """A content-hash key, as LMCache's are: one key, one value, ever."""
    return "chunk@" + hashlib.sha256(value).hexdigest()


def value_of(i: int, size: int = PAGE, version: int = 0) -> bytes:
    block = hashlib.sha256(f"{version}:{i}".encode()).digest()
    return (block * (size // len(block) + 1))[:size]


def info(cluster: RedisCluster, node: object, section: str) -> dict[str, str]:
    text = cluster.command(node, "INFO", section)  # type: ignore[arg-type]
    text = text.decode() if isinstance(text, bytes) else str(text)
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line and not line.startswith("#"))


def calls(cluster: RedisCluster, node: object, command: str) -> int:
    stat = info(cluster, node, "commandstats").get(f"cmdstat_{command}")
    if stat is None:
        return 0
    return int(dict(part.split("=") for part in stat.split(","))["calls"])


def wait_replicated(cluster: RedisCluster, timeout: float = 10.0) -> None:
    """Until every live replica has applied all its primary had sent (the offsets match): the
    bench's own wait, over the live nodes."""
    replicas = [node.port for node in cluster.replicas()]
    ports = [node.port for node in cluster.primaries()] + replicas
    caught_up = wait_for_replicas(ports, timeout, password=cluster.password, tls=cluster.client_context())
    assert caught_up, f"replicas {replicas} did not all catch up within {timeout} s"


def store_for(cluster: RedisCluster, read_from: str, **options: object) -> PagedRespStore:
    seed = cluster.nodes[0]
    url = f"redis://{seed.host}:{seed.port}?cluster=true&read_from={read_from}"
    page_size = options.pop("page_size", PAGE)
    return PagedRespStore(url, page_size=page_size, num_pages=options.pop("num_pages", 256),  # type: ignore[arg-type]
                          num_workers=2, **options)  # type: ignore[arg-type]


def put_values(store: PagedRespStore, values: dict[str, bytes]) -> None:
    pages = store.allocate_many(len(values))
    for page, value in zip(pages, values.values()):
        page.write_bytes(value)
    store.put(list(values), pages, [len(v) for v in values.values()])
    for page in pages:
        store.free(page)


def test_read_from_is_a_setting_in_every_form() -> None:
    assert RespSettings.resolve("redis://h:1").read_from == "primary"
    assert RespSettings.resolve("redis://h:1?cluster=true&read_from=prefer_replica").read_from == "prefer_replica"
    assert RespSettings.resolve("redis://h:1", cluster=True, read_from="PREFER_REPLICA").read_from == "prefer_replica"
    document = {"type": "native_plugin", "module_path": "lmcache_resp.lmcache.mp", "class_name": "RespConnector",
                "adapter_params": {"url": "redis://h:1", "cluster": True, "read_from": "prefer_replica"}}
    assert RespSettings.from_lmcache(document).read_from == "prefer_replica"
    # LMCache's non-MP YAML: remote_storage_plugin.<name>.read_from in extra_config.
    plugin = "remote_storage_plugin.resp."
    yaml_config = types.SimpleNamespace(remote_storage_plugins=["resp"], extra_config={
        plugin + "module_path": "lmcache_resp.lmcache.non_mp", plugin + "class_name": "RespRemoteConnector",
        plugin + "url": "redis://h:1", plugin + "cluster": True, plugin + "read_from": "prefer_replica",
    })
    assert settings_from_lmcache_config(yaml_config).read_from == "prefer_replica"
    assert RespSettings.resolve("redis://h:1", read_from="prefer_replica").to_dict()["read_from"] == "prefer_replica"
    with pytest.raises(Exception, match='read_from must be "primary"'):
        RespSettings.resolve("redis://h:1?read_from=replicas")
    # Without a cluster it changes nothing, and says so.
    warnings = RespSettings.resolve("redis://h:1", read_from="prefer_replica").warnings
    assert any("no effect without cluster=true" in w for w in warnings), warnings


@pytest.mark.parametrize("read_from", ["prefer_replica", "primary"])
def test_replicas_serve_reads_and_writes_stay_on_the_primaries(
    redis_cluster_replicas: RedisCluster, read_from: str
) -> None:
    cluster = redis_cluster_replicas
    values = {content_key(value_of(i)): value_of(i) for i in range(300)}
    keys = list(values)
    with store_for(cluster, read_from, num_pages=300) as store:
        put_values(store, values)
        wait_replicated(cluster)
        for node in cluster.nodes:
            cluster.command(node, "CONFIG", "RESETSTAT")
        pages = store.allocate_many(len(keys))
        assert store.exists(keys) == [True] * len(keys)
        assert store.get(keys, pages) == [True] * len(keys)
        assert all(bytes(page.byte_array) == values[key] for key, page in zip(keys, pages))
        by_endpoint = store.stats().endpoints
        assert store.delete(keys[:10]) == [True] * 10

    primaries, replicas = cluster.primaries(), cluster.replicas()
    gets = {node.port: calls(cluster, node, "get") for node in cluster.nodes}
    exists = {node.port: calls(cluster, node, "exists") for node in cluster.nodes}
    # Each key was read exactly once, by one node: none was retried or read twice.
    assert sum(gets.values()) == len(keys), gets
    assert sum(exists.values()) == len(keys), exists
    if read_from == "primary":
        assert all(gets[r.port] == 0 and exists[r.port] == 0 for r in replicas), (gets, exists)
        return
    # Each shard's keys spread over its primary and its replica (rendezvous hashing: about half
    # each; fewer than a fifth of 100 keys would be a 1e-9 chance).
    for replica in replicas:
        primary_port = int(info(cluster, replica, "replication")["master_port"])
        shard = gets[replica.port] + gets[primary_port]
        assert gets[replica.port] > shard // 5 and gets[primary_port] > shard // 5, gets
        # An EXISTS and the GET of a key go to the same node.
        assert exists[replica.port] == gets[replica.port], (gets, exists)
    # Our own counters agree, and name no SET or DEL sent to a replica.
    replica_names = {f"{r.host}:{r.port}" for r in replicas}
    for name, endpoint in by_endpoint.items():
        if name in replica_names:
            assert endpoint.keys.get("set", 0) == 0 and endpoint.keys.get("delete", 0) == 0, (name, endpoint.keys)
            assert endpoint.keys.get("get", 0) == gets[int(name.rsplit(":", 1)[1])]
    assert {p.port for p in primaries} | {r.port for r in replicas} == set(gets)


def test_a_replica_killed_mid_read_costs_no_wrong_byte_and_later_reads_hit(
    redis_cluster_replicas: RedisCluster,
) -> None:
    cluster = redis_cluster_replicas
    values = {content_key(value_of(i)): value_of(i) for i in range(240)}
    keys = list(values)
    timeout = 3.0
    with store_for(cluster, "prefer_replica", num_pages=240, timeout=timeout) as store:
        put_values(store, values)
        wait_replicated(cluster)
        pages = store.allocate_many(len(keys))
        victim = cluster.replicas()[0]
        outcomes: list[tuple[float, int, int]] = []  # (seconds, hits, failures) per batch
        stop = threading.Event()

        def read_loop() -> None:
            while not stop.is_set():
                for page in pages:
                    page.write_bytes(bytes(PAGE))
                started = time.monotonic()
                result = store.run("get", keys, pages)
                took = time.monotonic() - started
                failed = dict(result.failures)
                for i, (key, page) in enumerate(zip(keys, pages)):
                    if i in failed:
                        assert "timed out" in str(failed[i]) or "connect" in str(failed[i]).lower(), failed[i]
                    else:
                        # Content-hash keys never miss here: every key is stored and replicated.
                        assert result.hits[i], f"{key} missed"
                        assert bytes(page.byte_array) == values[key], f"wrong bytes for {key}"
                outcomes.append((took, sum(result.hits), len(failed)))

        reader = threading.Thread(target=read_loop)
        reader.start()
        try:
            while len(outcomes) < 2:
                time.sleep(0.01)
            cluster.kill(victim)
            killed_at = len(outcomes)
            deadline = time.monotonic() + 10
            while len(outcomes) < killed_at + 5 and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            stop.set()
            reader.join(timeout=30)
        assert not reader.is_alive(), "a batch never completed"
        # Every batch completed within the timeout (plus scheduling slack on a loaded machine).
        assert max(took for took, _, _ in outcomes) < timeout + 5, outcomes
        # Once the replica is known down, its keys are read from the primary: every key hits.
        assert outcomes[-1] == (outcomes[-1][0], len(keys), 0), outcomes[-3:]
        again = store.get(keys, pages)
        assert again == [True] * len(keys)
        assert all(bytes(page.byte_array) == values[key] for key, page in zip(keys, pages))
        assert store.stats().endpoints[f"{victim.host}:{victim.port}"].down


def test_a_replica_cut_off_from_its_primary_then_reattached_never_yields_mixed_bytes(
    redis_cluster_replicas: RedisCluster,
) -> None:
    """The replica stops replicating (its link to the primary is cut and cannot come back: a
    wrong masterauth), keys are overwritten and added on the primary, and reads go on through
    the replica; then the link is restored and the replica resyncs under the reads. Values are
    read in pieces (GETRANGE under WATCH/EXEC), so a value replaced mid-read on one node would
    show as a mix. Every hit is one whole version of its key; content-hash keys are always their
    own bytes."""
    cluster = redis_cluster_replicas
    size = 256 << 10
    stable = {content_key(value_of(i, size)): value_of(i, size) for i in range(24)}
    changing = [f"mutable-{i}" for i in range(24)]
    versions: dict[str, list[bytes]] = {key: [value_of(1000 + i, size, 0)] for i, key in enumerate(changing)}
    with store_for(cluster, "prefer_replica", page_size=size, num_pages=80, get_piece_bytes=64 << 10) as store:
        put_values(store, {**stable, **{k: v[0] for k, v in versions.items()}})
        wait_replicated(cluster)
        pages = store.allocate_many(48)
        keys = list(stable) + changing

        def read_all(resyncing: bool = False) -> tuple[int, int]:
            """Reads every key; checks each hit; returns how many hit, and how many of the
            changing keys gave an older version than the latest (from a replica behind). While a
            replica resyncs, a changing key's value can be replaced by its newer, shorter version
            between two pieces: that read is a PartialReadError (the documented outcome), never
            a hit; nothing else may fail."""
            for page in pages:
                page.write_bytes(bytes(size))
            result = store.run("get", keys, pages)
            for index, error in result.failures:
                assert resyncing and keys[index] in versions and isinstance(error, PartialReadError), result.failures
                assert not result.hits[index]
            stale = 0
            for key, page, hit, length in zip(keys, pages, result.hits, result.lengths):
                got = bytes(page.byte_array)[: length or 0]
                if key in stable:
                    assert hit and got == stable[key], f"{key}: wrong bytes"
                elif hit:
                    assert got in versions[key], f"{key}: bytes of no version of it (a mix?)"
                    stale += got != versions[key][-1]
            return sum(result.hits), stale

        for replica in cluster.replicas():
            cluster.command(replica, "CONFIG", "SET", "masterauth", "not-the-password")
            cluster.command(replica, "CLIENT", "KILL", "TYPE", "master")
        for round_ in range(1, 4):
            update = {key: value_of(2000 + i + 100 * round_, size - 4096 * round_, round_)
                      for i, key in enumerate(changing)}
            for key, value in update.items():
                versions[key].append(value)
            put_values(store, update)
            hits, stale = read_all()
            assert hits == len(keys)
            # The replicas serve their share of the changing keys, in the version they had.
            assert stale > 0, "no read was served by a cut-off replica"
        # Re-attached: each replica resyncs (its keys replaced under the WATCHes of reads).
        for replica in cluster.replicas():
            cluster.command(replica, "CONFIG", "SET", "masterauth", "")
        deadline = time.monotonic() + 10
        while True:
            read_all(resyncing=True)
            try:
                wait_replicated(cluster, timeout=0.2)
                break
            except AssertionError:
                assert time.monotonic() < deadline, "the replicas did not resync"
        read_all()
        # Caught up: every replica now serves the latest versions.
        for page in pages:
            page.write_bytes(bytes(size))
        assert store.get(changing, pages[: len(changing)]) == [True] * len(changing)
        for key, page in zip(changing, pages):
            assert bytes(page.byte_array)[: len(versions[key][-1])] == versions[key][-1]


def test_a_replica_moved_to_another_primary_redirects_its_old_shards_reads_which_still_hit(
    redis_cluster_replicas: RedisCluster,
) -> None:
    """``CLUSTER REPLICATE`` makes a replica follow another primary (a full resync: its old
    shard's keys are flushed). The client's map still names it a replica of its old shard, so
    reads of that shard's keys reach it and get ``MOVED`` back (a replica with ``READONLY``
    serves only its own primary's slots): they follow the redirect to the primary and hit,
    and the map is read again so later reads go where they should."""
    cluster = redis_cluster_replicas
    values = {content_key(value_of(i)): value_of(i) for i in range(240)}
    keys = list(values)
    with store_for(cluster, "prefer_replica", num_pages=240) as store:
        put_values(store, values)
        wait_replicated(cluster)
        pages = store.allocate_many(len(keys))
        assert store.get(keys, pages) == [True] * len(keys)
        mover = cluster.replicas()[0]
        old_primary = int(info(cluster, mover, "replication")["master_port"])
        new_primary = next(p for p in cluster.primaries() if p.port != old_primary)
        new_id = cluster.command(new_primary, "CLUSTER", "MYID")
        new_id = new_id.decode() if isinstance(new_id, bytes) else str(new_id)
        cluster.command(mover, "CLUSTER", "REPLICATE", new_id)
        deadline = time.monotonic() + 10
        while True:
            replication = info(cluster, mover, "replication")
            if int(replication["master_port"]) == new_primary.port and replication["master_link_status"] == "up":
                break
            assert time.monotonic() < deadline, "the replica did not switch primaries"
            time.sleep(0.05)
        # Synced with its new primary first: a replica mid-resync may answer a miss (seen once
        # in Valkey 9 runs), which is the miss policy's business, not this test's.
        wait_replicated(cluster)
        for _ in range(3):
            for page in pages:
                page.write_bytes(bytes(PAGE))
            result = store.run("get", keys, pages)
            assert not result.failures, result.failures
            assert result.hits == [True] * len(keys)
            assert all(bytes(page.byte_array) == values[key] for key, page in zip(keys, pages))
        moved = store.stats().endpoints[f"{mover.host}:{mover.port}"].moved
        assert moved > 0, "no read reached the moved replica: the test did not test the redirect"


def test_sentinel_replicas_answering_masterdown_hand_reads_in_pieces_to_the_primary() -> None:
    """Behind Sentinel, with values read in pieces: every replica is cut off from the primary
    (a masterauth the primary refuses) and told to serve no stale data, so it answers
    ``-MASTERDOWN``; the values are then replaced on the primary by others of the same length.
    Every read is the primary's new value, whole: a read that met a replica's refusal is read
    again from the primary, not from the replica (before issue #36: three tries there, then
    the refusal as the error)."""
    password, sentinel_password = "data-secret-5d1e", "sentinel-secret-0b7c"
    size = 128 << 10
    try:
        group = SentinelGroup(password=password, sentinel_password=sentinel_password)
    except SentinelUnsupported as exc:
        pytest.skip(f"this server binary cannot run as a Sentinel: {exc}")

    def data(port: int, *args: str) -> object:
        return wire.command(port, *args, password=password, timeout=5.0)

    def masterdowns(port: int) -> int:
        text = data(port, "INFO", "errorstats")
        assert isinstance(text, bytes)
        stat = dict(line.split(":", 1) for line in text.decode().splitlines() if ":" in line).get("errorstat_MASTERDOWN")
        return 0 if stat is None else int(stat.split("=")[1])

    keys = [f"sentinel-piece-{i}" for i in range(24)]
    old = {key: value_of(i, size, 1) for i, key in enumerate(keys)}
    new = {key: value_of(i, size, 2) for i, key in enumerate(keys)}
    with group, PagedRespStore(group.url, sentinel_password=sentinel_password, read_from="prefer_replica",
                               get_piece_bytes=16 << 10, page_size=size, num_pages=64, timeout=10,
                               num_workers=2) as store:
        put_values(store, old)
        ports = [server.port for server in group.servers]
        assert wait_for_replicas(ports, 15, password=password), "the replicas did not catch up"
        replicas = [port for port in ports if port != group.primary_port()]
        pages = store.allocate_many(len(keys))
        assert store.get(keys, pages) == [True] * len(keys)
        for port in replicas:
            data(port, "CONFIG", "SET", "masterauth", "not-the-password")
            data(port, "CONFIG", "SET", "replica-serve-stale-data", "no")
            data(port, "CLIENT", "KILL", "TYPE", "master")
        deadline = time.monotonic() + 10
        while any(b"master_link_status:up" in data(port, "INFO", "replication") for port in replicas):  # type: ignore[operator]
            assert time.monotonic() < deadline, "a replica's link stayed up"
            time.sleep(0.02)
        put_values(store, new)
        for page in pages:
            page.write_bytes(bytes(size))
        result = store.run("get", keys, pages)
        assert not result.failures, result.failures
        assert all(bytes(page.byte_array) == new[key] for key, page in zip(keys, pages)), "not the primary's bytes"
        assert sum(masterdowns(port) for port in replicas) > 0, "no replica refused a read: the test did not test it"
        for port in replicas:
            data(port, "CONFIG", "SET", "masterauth", password)
            data(port, "CONFIG", "SET", "replica-serve-stale-data", "yes")
