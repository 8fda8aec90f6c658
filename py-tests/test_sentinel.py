"""Sentinel (docs/reliability.md, the Sentinel rows): a store given a ``redis+sentinel://`` URL
finds the primary through the Sentinels, confirms it with ROLE, and follows it through a
failover without being restarted.

One group for the file (a primary, 2 replicas, 3 Sentinels; data and Sentinels each with their
own password), one store over it. Under a stream of batches the primary is killed, SIGSTOPped,
and failed over by ``SENTINEL FAILOVER``: every batch returns within its timeout, every key ends
in success or a clear error, every value read back is byte for byte what was written (a write
acknowledged by the old primary just before it died may be lost: Redis replicates
asynchronously; such a key reads back as a miss, never wrong bytes), and every key written after
the Sentinels named the new primary reads back. A wrong Sentinel password and an unknown service
name fail the store's construction fast and clearly.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from conftest import pattern
from lmcache_resp import BatchError, PagedRespStore
from lmcache_resp.errors import AuthenticationError, InvalidInputError, RespError
from lmcache_resp_servers import ReplyError, SentinelGroup, SentinelUnsupported, TlsUnsupported, command

DATA_PASSWORD = "data-secret-7f3a"
SENTINEL_PASSWORD = "sentinel-secret-91c2"
PAGE = 16 * 1024
BATCH = 8
TIMEOUT = 4.0
# A batch returns within its timeout; the margin is for a loaded 2-core VM.
RETURNS_WITHIN = TIMEOUT + 3.0


@pytest.fixture(scope="module")
def group() -> Iterator[SentinelGroup]:
    try:
        with SentinelGroup(password=DATA_PASSWORD, sentinel_password=SENTINEL_PASSWORD) as started:
            yield started
    except SentinelUnsupported as exc:
        pytest.skip(f"this server binary cannot run as a Sentinel: {exc}")


@pytest.fixture(scope="module")
def store(group: SentinelGroup) -> Iterator[PagedRespStore]:
    with PagedRespStore(
        group.url, sentinel_password=SENTINEL_PASSWORD, page_size=PAGE, num_pages=256, timeout=TIMEOUT,
        connect_timeout=1.0, num_workers=2,
    ) as opened:
        yield opened


class Stream:
    """Batches of SETs in a thread until stopped: what each key ended in, and when its batch
    began."""

    def __init__(self, store: PagedRespStore, name: str) -> None:
        self.store, self.name = store, name
        self.written: dict[str, tuple[int, float]] = {}  # key -> (seed, batch start)
        self.failed: dict[str, BaseException] = {}
        self.slowest = 0.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        pages = self.store.allocate_many(BATCH)
        try:
            batch = 0
            while not self.stop.is_set():
                keys = [f"{self.name}-{batch}-{i}" for i in range(BATCH)]
                seeds = [hash((self.name, batch, i)) & 0xFFFFFF for i in range(BATCH)]
                for page, seed in zip(pages, seeds):
                    page.byte_array[:] = pattern(PAGE, seed)
                began = time.monotonic()
                try:
                    self.store.put(keys, pages)
                    results: list[object] = [None] * BATCH
                except BatchError as exc:
                    results = exc.results
                self.slowest = max(self.slowest, time.monotonic() - began)
                for key, seed, result in zip(keys, seeds, results):
                    if isinstance(result, BaseException):
                        self.failed[key] = result
                    else:
                        self.written[key] = (seed, began)
                batch += 1
                time.sleep(0.01)
        finally:
            for page in pages:
                self.store.free(page)

    def written_since(self, since: float) -> int:
        return sum(1 for _, began in self.written.values() if began >= since)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(timeout=2 * RETURNS_WITHIN)
        assert not self.thread.is_alive(), "a batch never returned"


def read_back(store: PagedRespStore, written: dict[str, tuple[int, float]], must_hit_since: float) -> int:
    """Reads every written key: exact bytes or (only for a key written before `must_hit_since`)
    a miss. Returns the misses."""
    keys = list(written)
    misses = 0
    for start in range(0, len(keys), 64):
        chunk = keys[start:start + 64]
        pages = store.allocate_many(len(chunk))
        try:
            hits = store.get(chunk, pages)
            for key, hit, page in zip(chunk, hits, pages):
                seed, began = written[key]
                if hit:
                    assert bytes(page.byte_array) == pattern(PAGE, seed), f"{key}: wrong bytes"
                else:
                    assert began < must_hit_since, f"{key}, written after the failover, is missing"
                    misses += 1
        finally:
            for page in pages:
                store.free(page)
    return misses


def fail_over_under_load(group: SentinelGroup, store: PagedRespStore, name: str, fault: Callable[[int], None],
                         after: Callable[[int], None] = lambda _old: None) -> None:
    old = group.primary_port()
    stream = Stream(store, name)
    try:
        time.sleep(0.3)
        fault(old)
        new = group.wait_for_new_primary(old)
        named_at = time.monotonic()
        # Writes resume on the new primary, through the same store.
        deadline = named_at + 20
        while stream.written_since(named_at + 0.5) < 2 * BATCH:
            assert time.monotonic() < deadline, f"no write succeeded after the failover: {list(stream.failed.values())[-3:]}"
            time.sleep(0.05)
    finally:
        stream.finish()
    after(old)
    assert new != old
    assert stream.slowest < RETURNS_WITHIN, f"a batch took {stream.slowest:.1f} s (timeout {TIMEOUT} s)"
    for key, err in stream.failed.items():
        assert isinstance(err, RespError) and str(err), f"{key}: {err!r}"
        assert DATA_PASSWORD not in str(err) and SENTINEL_PASSWORD not in str(err)
    read_back(store, stream.written, named_at + 0.5)
    assert group.primary_port() == new


def test_writes_follow_a_killed_primary_to_the_promoted_replica(group: SentinelGroup, store: PagedRespStore) -> None:
    fail_over_under_load(group, store, "killed", lambda old: group.server_on(old).kill())


def test_writes_follow_a_stopped_primary_to_the_promoted_replica(group: SentinelGroup, store: PagedRespStore) -> None:
    # SIGSTOP: connections stay open and nothing answers; the old primary is woken afterwards
    # and the Sentinels turn it into a replica.
    fail_over_under_load(group, store, "stopped", lambda old: os.kill(group.server_on(old).pid, signal.SIGSTOP),
                         after=lambda old: os.kill(group.server_on(old).pid, signal.SIGCONT))


def test_writes_follow_a_sentinel_failover(
    group: SentinelGroup, store: PagedRespStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="lmcache_resp.sentinel")
    def failover(_old: int) -> None:
        deadline = time.monotonic() + 15
        while True:
            try:
                group.sentinel_command(0, "SENTINEL", "FAILOVER", group.service)
                return
            except ReplyError:  # NOGOODSLAVE while a replica catches up
                assert time.monotonic() < deadline, "no replica could be promoted"
                time.sleep(0.3)

    fail_over_under_load(group, store, "failover", failover)
    # The store heard of it over its subscription to +switch-master, not only from errors.
    new = group.primary_port()
    deadline = time.monotonic() + 5
    while not any(f"switched to 127.0.0.1:{new}" in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, [r.getMessage() for r in caplog.records]
        time.sleep(0.1)


def test_a_wrong_sentinel_password_is_a_clear_error_fast(group: SentinelGroup) -> None:
    began = time.monotonic()
    with pytest.raises(AuthenticationError) as caught:
        PagedRespStore(group.url, sentinel_password="not-the-password", page_size=PAGE, num_pages=4, timeout=TIMEOUT)
    assert time.monotonic() - began < TIMEOUT
    message = str(caught.value)
    assert "sentinel_password" in message and "mymaster" in message, message
    assert "not-the-password" not in message and DATA_PASSWORD not in message, message


def test_an_unknown_service_is_a_clear_error_fast(group: SentinelGroup) -> None:
    url = group.url.rsplit("/", 1)[0] + "/no-such-service"
    began = time.monotonic()
    with pytest.raises(InvalidInputError) as caught:
        PagedRespStore(url, sentinel_password=SENTINEL_PASSWORD, page_size=PAGE, num_pages=4, timeout=TIMEOUT)
    assert time.monotonic() - began < TIMEOUT
    message = str(caught.value)
    assert "no-such-service" in message and "sentinel_service_name" in message, message
    assert SENTINEL_PASSWORD not in message and DATA_PASSWORD not in message, message


def test_the_failover_bench_measures_both_clients(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m lmcache_resp.bench --sentinel-failover`, once, short: both clients write again
    after the primary is killed, and the figures say how long keys failed."""
    from lmcache_resp.bench.cli import parse_options
    from lmcache_resp.bench.sentinel_failover import SCHEMA, run_sentinel_failover

    try:
        status = run_sentinel_failover(parse_options(["--sentinel-failover", "--json", "--server", os.environ.get("REDIS_TEST_SERVER", "redis")]), stdout=sys.stdout,
                                       stderr=sys.stderr)
    except SentinelUnsupported as exc:
        pytest.skip(f"this server binary cannot run as a Sentinel: {exc}")
    assert status == 0, capsys.readouterr().err[-2000:]
    result = json.loads(capsys.readouterr().out)
    assert result["schema"] == SCHEMA and result["fault"] == "kill"
    for name in ("lmcache_resp", "redis-py"):
        figures = result["clients"][name]
        assert figures["back_after_s"] is not None, figures
        assert 0 <= figures["failing_s"] <= figures["back_after_s"] + 0.05, figures
        assert figures["acknowledged_keys"] > 0


def test_sentinel_is_given_by_url_fields_adapter_json_and_non_mp_yaml_and_never_shows_a_secret() -> None:
    """Every way in yields the same Sentinel settings; the passwords show as ***."""
    from types import SimpleNamespace

    from lmcache_resp.lmcache.non_mp import settings_from_lmcache_config
    from lmcache_resp.settings import RespSettings

    nodes = "127.0.0.1:26379,127.0.0.1:26380"
    fields = {"sentinel_nodes": nodes, "sentinel_service_name": "mymaster", "sentinel_password": SENTINEL_PASSWORD,
              "sentinel_username": "watcher", "password": DATA_PASSWORD}
    forms = {
        "url": RespSettings.resolve(f"redis+sentinel://:{DATA_PASSWORD}@{nodes}/mymaster?sentinel_username=watcher",
                                    sentinel_password=SENTINEL_PASSWORD),
        "fields": RespSettings.resolve(**fields),
        "adapter json": RespSettings.from_lmcache(json.dumps({
            "type": "native_plugin", "module_path": "lmcache_resp.lmcache.mp", "class_name": "RespConnector",
            "adapter_params": fields})),
        "non-MP yaml": settings_from_lmcache_config(SimpleNamespace(
            remote_storage_plugins=["resp"],
            extra_config={"remote_storage_plugin.resp.module_path": "lmcache_resp.lmcache.non_mp",
                          "remote_storage_plugin.resp.class_name": "RespRemoteConnector",
                          **{f"remote_storage_plugin.resp.{k}": v for k, v in fields.items()}})),
    }
    for form, settings in forms.items():
        shown = settings.to_dict()
        assert shown["sentinel_nodes"] == nodes and shown["sentinel_service_name"] == "mymaster", form
        assert shown["sentinel_username"] == "watcher" and shown["sentinel_password"] == "***", form
        assert shown["password"] == "***" and shown["sentinel_tls"] is False, form
        for text in (repr(settings), str(shown)):
            assert SENTINEL_PASSWORD not in text and DATA_PASSWORD not in text, (form, text)
    with pytest.raises(InvalidInputError, match="sentinel_nodes needs sentinel_service_name"):
        RespSettings.resolve(sentinel_nodes=nodes)
    with pytest.raises(InvalidInputError, match="sentinel_password set without Sentinels") as caught:
        RespSettings.resolve("redis://127.0.0.1:6390", sentinel_password=SENTINEL_PASSWORD)
    assert SENTINEL_PASSWORD not in str(caught.value)


def test_a_blocking_client_refuses_sentinel_saying_what_to_use() -> None:
    from lmcache_resp import RedisClient

    with pytest.raises(InvalidInputError, match="does not follow Sentinel failovers"):
        RedisClient(url="redis+sentinel://127.0.0.1:26379/mymaster")


def test_no_sentinel_answering_at_start_is_a_connection_error_naming_service_and_sentinels() -> None:
    from lmcache_resp.errors import RespConnectionError
    from lmcache_resp_servers import free_port

    ports = [free_port(), free_port()]
    url = f"redis+sentinel://127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/mymaster"
    began = time.monotonic()
    with pytest.raises(RespConnectionError) as caught:
        PagedRespStore(url, sentinel_password=SENTINEL_PASSWORD, page_size=PAGE, num_pages=4, timeout=TIMEOUT)
    assert time.monotonic() - began < TIMEOUT
    message = str(caught.value)
    assert "no primary is known" in message and '"mymaster"' in message, message
    assert all(f"127.0.0.1:{port}" in message for port in ports), message
    assert SENTINEL_PASSWORD not in message


def test_tls_to_the_sentinels_and_the_data_server_through_a_failover() -> None:
    """rediss+sentinel://: TLS to the Sentinels (their own password) and to the data server,
    the certificates verified; the subscription and the new primary over TLS too."""
    try:
        tls_group = SentinelGroup(password=DATA_PASSWORD, sentinel_password=SENTINEL_PASSWORD, tls=True)
    except (SentinelUnsupported, TlsUnsupported) as exc:
        pytest.skip(f"this server binary cannot run TLS Sentinels: {exc}")
    with tls_group:
        with pytest.raises(RespError, match="no primary is known"):
            # The same Sentinels in plaintext: they do not answer, so TLS below is what reaches them.
            PagedRespStore(tls_group.url, sentinel_password=SENTINEL_PASSWORD, sentinel_tls=False,
                           ssl_ca_certs=str(tls_group.certs.ca), page_size=PAGE, num_pages=4, timeout=TIMEOUT,
                           connect_timeout=1.0)
        with PagedRespStore(
            tls_group.url, sentinel_password=SENTINEL_PASSWORD, ssl_ca_certs=str(tls_group.certs.ca), page_size=PAGE,
            num_pages=2 * BATCH, timeout=TIMEOUT, connect_timeout=1.0, num_workers=1,
        ) as tls_store:
            assert tls_store.settings.to_dict()["sentinel_tls"] is True
            written: dict[str, tuple[int, float]] = {}

            def write(prefix: str) -> None:
                pages = tls_store.allocate_many(BATCH)
                keys = [f"{prefix}-{i}" for i in range(BATCH)]
                for i, page in enumerate(pages):
                    page.byte_array[:] = pattern(PAGE, i)
                tls_store.put(keys, pages)
                written.update({key: (i, time.monotonic()) for i, key in enumerate(keys)})
                for page in pages:
                    tls_store.free(page)

            write("before")
            old = tls_group.primary_port()
            tls_group.sentinel_command(0, "SENTINEL", "FAILOVER", tls_group.service)
            new = tls_group.wait_for_new_primary(old)
            named_at = time.monotonic()
            deadline = named_at + 15
            while True:
                try:
                    write("after")
                    break
                except BatchError:
                    assert time.monotonic() < deadline, "writes did not resume over TLS"
                    time.sleep(0.1)
            assert new != old
            read_back(tls_store, written, named_at)


def test_reads_spread_over_the_replicas_sentinel_lists_and_follow_a_failover() -> None:
    """read_from="prefer_replica" with Sentinel: the replicas ``SENTINEL replicas`` lists serve
    GETs (each data node's own INFO commandstats), byte for byte, with no READONLY (standalone
    replicas refuse it); with read_from="primary" they serve none. After ``SENTINEL FAILOVER``
    the new primary's replicas are learned: reads of keys old and new hit with the right bytes,
    the demoted primary among those serving once it replicates."""
    try:
        replica_group = SentinelGroup(password=DATA_PASSWORD, sentinel_password=SENTINEL_PASSWORD)
    except SentinelUnsupported as exc:
        pytest.skip(f"this server binary cannot run as a Sentinel: {exc}")

    def data(port: int, *args: str) -> object:
        return command(port, *args, password=DATA_PASSWORD, timeout=2.0)

    def info(port: int, section: str) -> dict[str, str]:
        text = data(port, "INFO", section)
        assert isinstance(text, bytes)
        return dict(line.split(":", 1) for line in text.decode().splitlines() if ":" in line)

    def gets(port: int) -> int:
        stat = info(port, "commandstats").get("cmdstat_get")
        return 0 if stat is None else int(dict(part.split("=") for part in stat.split(","))["calls"])

    def wait_replicated(primary: int, replicas: int = 2, timeout: float = 15.0) -> list[int]:
        """Until `replicas` replicas of `primary` are up and have applied all it sent; their ports."""
        deadline = time.monotonic() + timeout
        while True:
            fields = info(primary, "replication")
            offset = int(fields["master_repl_offset"])
            caught_up = [
                int(parts["port"]) for parts in (
                    dict(p.split("=", 1) for p in value.split(","))
                    for name, value in fields.items() if name.startswith("slave") and name[5:].isdigit()
                ) if parts.get("state") == "online" and int(parts["offset"]) >= offset
            ]
            if len(caught_up) >= replicas:
                return caught_up
            assert time.monotonic() < deadline, f"the replicas of {primary} did not catch up: {fields}"
            time.sleep(0.05)

    def put(store: PagedRespStore, prefix: str, count: int) -> dict[str, int]:
        written = {f"{prefix}-{i}": hash((prefix, i)) & 0xFFFFFF for i in range(count)}
        pages = store.allocate_many(count)
        for page, seed in zip(pages, written.values()):
            page.byte_array[:] = pattern(PAGE, seed)
        store.put(list(written), pages)
        for page in pages:
            store.free(page)
        return written

    def read_counted(store: PagedRespStore, written: dict[str, int]) -> dict[int, int]:
        """Reads every key (each a hit, byte for byte); the GETs each data node served."""
        ports = [server.port for server in replica_group.servers]
        for port in ports:
            data(port, "CONFIG", "RESETSTAT")
        pages = store.allocate_many(len(written))
        try:
            assert store.get(list(written), pages) == [True] * len(written)
            for (key, seed), page in zip(written.items(), pages):
                assert bytes(page.byte_array) == pattern(PAGE, seed), f"{key}: wrong bytes"
        finally:
            for page in pages:
                store.free(page)
        return {port: gets(port) for port in ports}

    def open_store(read_from: str) -> PagedRespStore:
        return PagedRespStore(replica_group.url, sentinel_password=SENTINEL_PASSWORD, read_from=read_from,
                              page_size=PAGE, num_pages=128, timeout=TIMEOUT, connect_timeout=1.0, num_workers=2)

    keys = 60
    with replica_group, open_store("prefer_replica") as spread, open_store("primary") as primary_only:
        assert not [w for w in spread.settings.warnings if "read_from" in w], spread.settings.warnings
        old = replica_group.primary_port()
        before = put(spread, "before", keys)
        replicas = wait_replicated(old)
        served = read_counted(spread, before)
        # Each key read once, by one node; every node serves some (rendezvous over 3 nodes: a
        # node with none of 60 keys is a 1e-10 chance).
        assert sum(served.values()) == keys, served
        assert all(served[port] > 0 for port in [old, *replicas]), served
        served = read_counted(primary_only, before)
        assert served[old] == keys and all(served[port] == 0 for port in replicas), served

        deadline = time.monotonic() + 15
        while True:
            try:
                replica_group.sentinel_command(0, "SENTINEL", "FAILOVER", replica_group.service)
                break
            except ReplyError:  # NOGOODSLAVE while a replica catches up
                assert time.monotonic() < deadline, "no replica could be promoted"
                time.sleep(0.3)
        new = replica_group.wait_for_new_primary(old)
        # Reads keep hitting with the right bytes through the failover, from whichever node.
        assert sum(read_counted(spread, before).values()) >= keys
        # Until the store has heard of the new primary, a write may still land on the old one,
        # which keeps saying it is the primary until the Sentinels turn it (and then loses it:
        # see fail_over_under_load); written again until the new primary has every key.
        deadline = time.monotonic() + 15
        while True:
            try:
                after = put(spread, "after", keys)
                if data(new, "EXISTS", *after) == keys:
                    break
            except BatchError:
                pass
            assert time.monotonic() < deadline, "writes did not resume on the new primary"
            time.sleep(0.1)
        # Once the demoted primary replicates from the new one (the Sentinels turn it within
        # about 10 s) and the store has listed the replicas again, all three serve the new keys.
        assert old in wait_replicated(new, timeout=30.0)
        deadline = time.monotonic() + 15
        while True:
            served = read_counted(spread, {**before, **after})
            if all(served[server.port] > 0 for server in replica_group.servers):
                break
            assert time.monotonic() < deadline, f"the new replica set was not learned: {served}"
            time.sleep(1.0)
        assert served[new] < 2 * keys, served
