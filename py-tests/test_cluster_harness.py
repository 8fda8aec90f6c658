"""The local Redis Cluster fixtures: every slot served, keys where the slot table says, failover.

Checked with redis-py's own slot computation and cluster client, independent of lmcache-resp.
"""

from __future__ import annotations

import socket
import time

import pytest
from conftest import ClusterNode, RedisCluster
from lmcache_resp_testing.servers import redis_py

SLOTS = 16384


def slot_owners(cluster: RedisCluster) -> dict[int, int]:
    """Slot -> port of the primary serving it, as the first live primary's CLUSTER SLOTS says."""
    with redis_py(cluster, cluster.primaries()[0]) as client:
        ranges = client.execute_command("CLUSTER SLOTS")
    owners: dict[int, int] = {}
    # [start, end, [ip, port, id, metadata], replica...] per range.
    for start, end, (_ip, port, *_), *_replicas in ranges:
        for slot in range(start, end + 1):
            assert slot not in owners, f"slot {slot} listed twice"
            owners[slot] = port
    return owners


def cluster_state(cluster: RedisCluster, node: ClusterNode) -> str:
    with redis_py(cluster, node) as client:
        return str(client.cluster("INFO")["cluster_state"])


def test_every_slot_is_served_and_keys_land_where_the_slot_table_says(redis_cluster: RedisCluster) -> None:
    from redis.crc import key_slot
    from redis.exceptions import MovedError

    started = time.monotonic()
    ports = {node.port for node in redis_cluster.nodes}
    assert len(redis_cluster.nodes) == 3
    assert {node.port for node in redis_cluster.primaries()} == ports
    assert redis_cluster.replicas() == []
    owners = slot_owners(redis_cluster)
    assert sorted(owners) == list(range(SLOTS))
    assert set(owners.values()) == ports

    keys = [f"lmcache@model@0@{i:04x}" for i in range(20)] + ["foo", "{user1000}.following", "foo{{bar}}zap"]
    for i, key in enumerate(keys):
        assert redis_cluster.cli("SET", key, f"value-{i}").strip() == "OK"
        owner = owners[key_slot(key.encode())]
        for node in redis_cluster.nodes:
            with redis_py(redis_cluster, node) as client:
                assert client.execute_command("CLUSTER KEYSLOT", key) == key_slot(key.encode())
                if node.port == owner:
                    assert client.get(key) == f"value-{i}".encode(), (key, node.port)
                else:
                    # A node that does not own the slot redirects instead of answering.
                    with pytest.raises(MovedError) as moved:
                        client.get(key)
                    assert (moved.value.slot_id, moved.value.host, moved.value.port) == (key_slot(key.encode()), "127.0.0.1", owner)

    # The seed URL is all a cluster client needs.
    import redis

    with redis.RedisCluster.from_url(redis_cluster.seed_url) as client:
        assert client.get("foo") == f"value-{keys.index('foo')}".encode()
    assert time.monotonic() - started < 20


def test_a_replica_is_promoted_when_its_primary_is_killed(redis_cluster_replicas: RedisCluster) -> None:
    from redis.crc import key_slot

    cluster = redis_cluster_replicas
    primaries, replicas = cluster.primaries(), cluster.replicas()
    assert primaries == cluster.nodes[:3] and replicas == cluster.nodes[3:]
    victim = primaries[1]
    with redis_py(cluster, victim) as client:
        heirs = [int(r["port"]) for r in client.info("replication").values() if isinstance(r, dict)]
    assert len(heirs) == 1, heirs
    heir = next(node for node in replicas if node.port == heirs[0])

    owners = slot_owners(cluster)
    key = next(f"survivor-{i}" for i in range(10000) if owners[key_slot(f"survivor-{i}".encode())] == victim.port)
    assert cluster.cli("SET", key, "kept").strip() == "OK"
    with redis_py(cluster, victim) as client:
        assert client.execute_command("WAIT", 1, 5000) == 1, "the replica acknowledged the write"

    cluster.kill(victim)
    killed = time.monotonic()
    while not (heir in cluster.primaries() and cluster_state(cluster, cluster.nodes[0]) == "ok"):
        assert time.monotonic() - killed < 15, "no failover within 15 s"
        time.sleep(0.1)
    assert victim not in cluster.primaries()
    assert set(slot_owners(cluster).values()) == {primaries[0].port, heir.port, primaries[2].port}
    assert cluster.cli("GET", key).strip() == "kept"

    cluster.stop()
    for node in cluster.nodes:
        with socket.socket() as sock:
            assert sock.connect_ex((node.host, node.port)) != 0, f"{node.port} still listens"
