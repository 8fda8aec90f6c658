"""A Sentinel that lies or misbehaves (docs/reliability.md, the Sentinel rows; issue 36, case 1).

A fake Sentinel (lmcache_resp_testing.fake_sentinel), written for these tests, stands beside
the real ones of one group (a primary, 2 replicas, 3 Sentinels, each side with its own
password). It names a replica, a port where nothing listens, a listener that is not Redis, or
a server that says it is a primary but is not the group's; it answers slowly, never, with
hundreds of MiB or with malformed RESP; it floods ``+switch-master``. Each time: no value goes
anywhere but to a node that says it is the primary, the store says what happened (the error
names the Sentinel and what it said), time and memory stay bounded, and the store is itself
again once the Sentinels agree. With ``rediss+sentinel://`` the certificate of the node a
Sentinel names is checked against that name (or ``ssl_server_name``).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import pattern
from lmcache_resp import BatchError, PagedRespStore, _logging
from lmcache_resp.errors import AuthenticationError, RespConnectionError, RespError, TlsError
from lmcache_resp_testing.fake_sentinel import FakeSentinel, NotRedis
from lmcache_resp_servers import (
    RedisServer,
    SentinelGroup,
    SentinelUnsupported,
    TlsUnsupported,
    command,
    free_port,
    server_binary,
    server_supports_tls,
)
from lmcache_resp_testing.certs import TestCerts, make_test_certs

DATA_PASSWORD = "data-secret-hostile-5d1e"
SENTINEL_PASSWORD = "sentinel-secret-hostile-c4b7"
PAGE = 4096
TIMEOUT = 4.0
CONNECT = 1.0
HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def group() -> Iterator[SentinelGroup]:
    try:
        with SentinelGroup(password=DATA_PASSWORD, sentinel_password=SENTINEL_PASSWORD) as started:
            yield started
    except SentinelUnsupported as exc:
        pytest.skip(f"this server binary cannot run as a Sentinel: {exc}")


def real_sentinels(group: SentinelGroup) -> list[str]:
    return [f"{HOST}:{port}" for port in group.sentinel_ports]


def data(port: int, *args: str) -> Any:
    return command(port, *args, password=DATA_PASSWORD, timeout=5.0)


def a_replica(group: SentinelGroup) -> int:
    for server in group.servers:
        role = data(server.port, "ROLE")
        if isinstance(role, list) and role[0] == b"slave":
            return server.port
    raise AssertionError("the group has no replica")


def open_store(sentinels: list[str], scheme: str = "redis", **options: Any) -> PagedRespStore:
    options = {"sentinel_password": SENTINEL_PASSWORD, "page_size": PAGE, "num_pages": 64, "timeout": TIMEOUT,
               "connect_timeout": CONNECT, "num_workers": 1, **options}
    url = f"{scheme}+sentinel://:{DATA_PASSWORD}@{','.join(sentinels)}/mymaster"
    return PagedRespStore(url, **options)


def put(store: PagedRespStore, prefix: str, count: int = 4) -> dict[str, bytes]:
    """Writes ``count`` keys (raises BatchError if any fails); their values."""
    pages = store.allocate_many(count)
    try:
        values = {f"{prefix}-{i}": pattern(PAGE, hash((prefix, i)) & 0xFFFF) for i in range(count)}
        for page, value in zip(pages, values.values()):
            page.byte_array[:] = value
        store.put(list(values), pages)
        return values
    finally:
        for page in pages:
            store.free(page)


def assert_stored_on(port: int, values: dict[str, bytes]) -> None:
    for key, value in values.items():
        assert data(port, "GET", key) == value, f"{key} is not on the server at port {port}"


def assert_no_secret(text: str) -> None:
    assert DATA_PASSWORD not in text and SENTINEL_PASSWORD not in text, text


def capture_sentinel_log(caplog: pytest.LogCaptureFixture, level: int) -> None:
    caplog.set_level(level, logger="lmcache_resp.sentinel")
    _logging.refresh_level()  # the core formats records at this level from now on


def sentinel_log(caplog: pytest.LogCaptureFixture) -> list[str]:
    _logging.flush()
    return [r.getMessage() for r in caplog.records if r.name.startswith("lmcache_resp.sentinel")]


def wait_subscribed(fake: FakeSentinel) -> None:
    deadline = time.monotonic() + 10
    while not fake.subscribers:
        assert time.monotonic() < deadline, "the store never subscribed to the Sentinel that led it to the primary"
        time.sleep(0.02)


def peak_rss() -> int:
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+)", status).group(1)) * 1024  # type: ignore[union-attr]


def reset_peak_rss() -> None:
    Path("/proc/self/clear_refs").write_text("5")


# -- it names the wrong node ---------------------------------------------------------------------


def test_a_sentinel_naming_a_replica_a_dead_port_or_a_non_redis_listener_is_refused_alone_and_passed_over(
    group: SentinelGroup, caplog: pytest.LogCaptureFixture
) -> None:
    capture_sentinel_log(caplog, logging.WARNING)
    primary, replica = group.primary_port(), a_replica(group)
    # A write sent to the replica by mistake would be taken, and would never reach the primary.
    data(replica, "CONFIG", "SET", "replica-read-only", "no")
    try:
        with (NotRedis() as not_redis,
              FakeSentinel((HOST, replica), password=SENTINEL_PASSWORD) as names_replica,
              FakeSentinel((HOST, free_port()), password=SENTINEL_PASSWORD) as names_dead,
              FakeSentinel((HOST, not_redis.port), password=SENTINEL_PASSWORD) as names_not_redis):
            dead = names_dead.names
            assert isinstance(dead, tuple)
            lies = {
                names_replica: f"named {HOST}:{replica}, which is a slave, not a primary",
                names_dead: f"named {HOST}:{dead[1]}, which did not confirm it is the primary: cannot connect",
                names_not_redis: f"named {not_redis.address}, which did not confirm it is the primary",
            }
            # Alone, each fails the store's construction, saying which Sentinel named what.
            for fake, said in lies.items():
                began = time.monotonic()
                with pytest.raises(RespConnectionError) as caught:
                    open_store([fake.address])
                assert time.monotonic() - began < TIMEOUT
                message = str(caught.value)
                assert message.startswith('no primary is known: service "mymaster"'), message
                assert f"{fake.address}: {said}" in message, message
                assert_no_secret(message)
            # Beside the real Sentinels, and asked before them, they are passed over.
            with open_store([fake.address for fake in lies] + real_sentinels(group)) as store:
                written = put(store, "liars")
                assert_no_secret(repr(store) + repr(store.settings) + str(store.settings.to_dict()))
            assert_stored_on(primary, written)
            assert b"SET" not in not_redis.received
            # What docs/reliability.md says: the data server's password goes where a Sentinel
            # points (here, to a listener that is not Redis); TLS with checked names stops it.
            assert DATA_PASSWORD.encode() in not_redis.received
            log = sentinel_log(caplog)
            for fake, said in lies.items():
                assert any(f"{fake.address}: {said}" in line for line in log), log
            for line in log:
                assert_no_secret(line)
    finally:
        data(replica, "CONFIG", "SET", "replica-read-only", "yes")


def test_a_liar_with_the_real_sentinels_unreachable_stops_writes_saying_so_until_they_agree_again(
    group: SentinelGroup,
) -> None:
    primary, replica = group.primary_port(), a_replica(group)
    with FakeSentinel((HOST, primary), password=SENTINEL_PASSWORD) as fake:
        with open_store([fake.address] + real_sentinels(group)) as store:
            put(store, "agreeing")
            wait_subscribed(fake)  # it led the store to the primary: it is listened to first
            fake.names = (HOST, replica)
            stopped = [process.pid for process in group.sentinel_processes]
            for pid in stopped:
                os.kill(pid, signal.SIGSTOP)
            try:
                fake.switch_master((HOST, replica), (HOST, primary))
                deadline = time.monotonic() + 20
                while True:
                    began = time.monotonic()
                    try:
                        put(store, "meanwhile")
                    except BatchError as exc:
                        took = time.monotonic() - began
                        errors = [r for r in exc.results if isinstance(r, BaseException)]
                        break
                    assert time.monotonic() < deadline, "writes never stopped though no Sentinel could be trusted"
                    time.sleep(0.1)
                # Once the round has failed, keys fail at once, saying what each Sentinel did.
                assert took < 1.0, took
                for err in errors:
                    assert isinstance(err, RespConnectionError), repr(err)
                    message = str(err)
                    assert "no primary is known" in message, message
                    assert f"{fake.address}: named {HOST}:{replica}, which is a slave" in message, message
                    assert f"{HOST}:{group.sentinel_ports[0]}" in message, message
                    assert_no_secret(message)
            finally:
                for pid in stopped:
                    os.kill(pid, signal.SIGCONT)
            # The real Sentinels answer again and agree: writes resume, the liar passed over.
            deadline = time.monotonic() + 20
            while True:
                try:
                    after = put(store, "agreeing-again")
                    break
                except BatchError:
                    assert time.monotonic() < deadline, "writes did not resume once the Sentinels agreed"
                    time.sleep(0.1)
        assert_stored_on(primary, after)
        assert data(replica, "ROLE")[0] == b"slave"


# -- it answers badly ----------------------------------------------------------------------------

# What a misbehaving Sentinel does to `SENTINEL get-master-addr-by-name`, and what the error says.
MISBEHAVIOURS: dict[str, tuple[dict[str, Any], str]] = {
    "slow": ({"behaviour": "slow", "delay": 3 * CONNECT}, "timed out waiting for the reply to SENTINEL"),
    "silent": ({"behaviour": "silent"}, "timed out"),
    "huge": ({"behaviour": "huge"}, "exceeds 1 MiB, the cap on the size of one reply"),
    "not-resp": ({"behaviour": "malformed", "malformed": b"\x00\xffHTTP/1.1 200 OK\r\n\r\n"}, "protocol"),
    "bad-integer": ({"behaviour": "malformed", "malformed": b"*2\r\n$9\r\n127.0.0.1\r\n:6x9\r\n"}, "protocol"),
    "wrong-types": ({"behaviour": "malformed", "malformed": b"*2\r\n:1\r\n:2\r\n"}, "not [host, port]"),
    "bad-port": ({"behaviour": "malformed", "malformed": b"*2\r\n$9\r\n127.0.0.1\r\n$5\r\n99999\r\n"},
                 "named no usable address"),
    "bad-host": ({"behaviour": "malformed", "malformed": b"*2\r\n$12\r\n127.0.0.1\r\nX\r\n$4\r\n6379\r\n"},
                 "named no usable address"),
    "long-host": ({"behaviour": "malformed",
                   "malformed": b"*2\r\n$60000\r\n" + b"h" * 60000 + b"\r\n$4\r\n6379\r\n"},
                  "named no usable address"),
    "many-parts": ({"behaviour": "malformed",
                    "malformed": b"*10000\r\n" + b"$9\r\n127.0.0.1\r\n" * 10000}, "not [host, port]"),
}


@pytest.mark.parametrize("case", list(MISBEHAVIOURS))
def test_a_sentinel_that_answers_slowly_never_hugely_or_malformed_costs_bounded_time_and_memory(
    group: SentinelGroup, case: str
) -> None:
    behaviour, says = MISBEHAVIOURS[case]
    with FakeSentinel((HOST, group.primary_port()), password=SENTINEL_PASSWORD) as fake:
        for name, value in behaviour.items():
            setattr(fake, name, value)
        # Alone: a clear error naming the Sentinel, within the connect timeout (its PING's, then
        # its question's), and in bounded memory.
        reset_peak_rss()
        before = peak_rss()
        began = time.monotonic()
        with pytest.raises(RespConnectionError) as caught:
            open_store([fake.address])
        took = time.monotonic() - began
        grew = peak_rss() - before
        message = str(caught.value)
        assert f"{fake.address}: " in message, message[:2000]
        assert says.lower() in message.lower(), message[:2000]
        assert len(message) < 4096, f"an error of {len(message)} characters"
        assert_no_secret(message)
        assert took < 2 * CONNECT + 1.0, f"{took:.1f} s"
        assert grew < 48 << 20, f"the process grew by {grew >> 20} MiB on one Sentinel's answer"
        if case == "huge":
            assert fake.huge_sent < 64 << 20, f"{fake.huge_sent >> 20} MiB read before the cap stopped it"
        # Asked first, beside a real Sentinel: the store opens all the same, in bounded time.
        began = time.monotonic()
        with open_store([fake.address, real_sentinels(group)[0]]) as store:
            put(store, f"after-{case}")
        assert time.monotonic() - began < 2 * CONNECT + 2.0


# -- it flaps ------------------------------------------------------------------------------------


def test_switch_master_flapping_hundreds_of_times_a_second_is_rate_limited_and_logged_grouped(
    group: SentinelGroup, caplog: pytest.LogCaptureFixture
) -> None:
    capture_sentinel_log(caplog, logging.INFO)
    primary, replica = group.primary_port(), a_replica(group)

    def connections(port: int) -> int:
        stats = data(port, "INFO", "stats").decode()
        return int(re.search(r"total_connections_received:(\d+)", stats).group(1))  # type: ignore[union-attr]

    with FakeSentinel((HOST, primary), password=SENTINEL_PASSWORD) as fake:
        store = open_store([fake.address] + real_sentinels(group))
        written: dict[str, bytes] = {}
        failed: list[BaseException] = []
        stop = threading.Event()

        def write() -> None:
            batch = 0
            while not stop.is_set():
                try:
                    written.update(put(store, f"flap-{batch}"))
                except BatchError as exc:
                    failed.extend(r for r in exc.results if isinstance(r, BaseException))
                batch += 1
                time.sleep(0.02)

        try:
            wait_subscribed(fake)
            writer = threading.Thread(target=write, daemon=True)
            writer.start()
            asked, primary_before, replica_before = fake.questions(), connections(primary), connections(replica)
            began = time.monotonic()
            sent = fake.flood(300, 4.0, [(HOST, replica), (HOST, primary)])
            seconds = time.monotonic() - began
            accepted = fake.accepted_since(began)
            asked = fake.questions() - asked
            to_primary = connections(primary) - primary_before - 1  # less this INFO's own
            to_replica = connections(replica) - replica_before - 1
            time.sleep(0.5)  # the last messages reach the listener before the store closes
            stop.set()
            writer.join(timeout=2 * TIMEOUT)
            assert not writer.is_alive(), "a batch never returned"
        finally:
            stop.set()
            store.close()
        print(f"{sent} messages in {seconds:.1f} s: {asked} rounds, {accepted} connections to the Sentinel, "
              f"{to_primary} to the primary, {to_replica} to the replica")
        assert sent >= 1000, f"only {sent} messages went out"
        # Discovery runs at most every 0.1 s, each round one connection to the Sentinel asked
        # and one to the node it named.
        assert asked <= 10 * seconds + 2, f"{asked} rounds in {seconds:.1f} s"
        assert accepted <= 10 * seconds + 2, f"{accepted} connections to the Sentinel in {seconds:.1f} s"
        assert to_primary <= 10 * seconds + 2, f"{to_primary} connections to the primary in {seconds:.1f} s"
        assert to_replica <= 2, f"{to_replica} connections to the replica the messages named"
        # Nothing lost: every batch went through, every value is where it belongs.
        assert not failed, failed[:3]
        assert len(written) > 100
        assert_stored_on(primary, written)
        # The log stays readable: a few lines, then one that counts the rest.
        log = [line for line in sentinel_log(caplog) if "switch" in line]
        assert len(log) <= 8, f"{len(log)} lines for {sent} messages: {log[:10]}"
        print("\n".join(log))
        counted = [int(m.group(1)) for line in log if (m := re.search(r"(\d+) more \+switch-master", line))]
        assert counted and sum(counted) + len(log) - len(counted) >= sent - 5, log


# -- the Sentinels disagree ----------------------------------------------------------------------


def test_when_sentinels_disagree_the_first_whose_node_confirms_with_role_wins_and_stays_first(
    group: SentinelGroup, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    capture_sentinel_log(caplog, logging.INFO)
    primary, replica = group.primary_port(), a_replica(group)
    # A server that is a primary, but not the group's: the fake Sentinel names it.
    other = RedisServer(tmp_path / "other", password=DATA_PASSWORD)
    try:
        with FakeSentinel((HOST, other.port), password=SENTINEL_PASSWORD) as fake:
            with open_store([fake.address] + real_sentinels(group)) as store:
                # Asked first, its answer is confirmed by ROLE and taken: no quorum is counted.
                first = put(store, "first-asked")
                assert_stored_on(other.port, first)
                assert all(data(primary, "EXISTS", key) == 0 for key in first)
                wait_subscribed(fake)
                # It names a replica now: ROLE refuses it, and the next Sentinel's answer wins.
                fake.names = (HOST, replica)
                fake.switch_master((HOST, replica), (HOST, other.port))
                deadline = time.monotonic() + 10
                while not any(f"the primary is now {HOST}:{primary}" in line for line in sentinel_log(caplog)):
                    assert time.monotonic() < deadline, sentinel_log(caplog)
                    time.sleep(0.05)
                second = put(store, "second")
                assert_stored_on(primary, second)
                # The Sentinel that led is asked first from now on: the fake is not even asked.
                asked = fake.questions()
                fake.names = (HOST, other.port)
                fake.switch_master((HOST, other.port), (HOST, primary))
                time.sleep(1.0)
                third = put(store, "third")
                assert_stored_on(primary, third)
                assert fake.questions() == asked
    finally:
        other.kill()


def test_with_no_sentinel_answering_the_primary_in_use_is_kept_while_it_says_it_is_one(
    group: SentinelGroup, caplog: pytest.LogCaptureFixture
) -> None:
    capture_sentinel_log(caplog, logging.WARNING)
    primary = group.primary_port()
    with FakeSentinel((HOST, primary), password=SENTINEL_PASSWORD) as fake:
        with open_store([fake.address]) as store:
            put(store, "before")
            wait_subscribed(fake)
            # It announces a switch, then answers nothing: the round that follows learns nothing.
            fake.behaviour = "silent"
            switched = time.monotonic()
            fake.switch_master((HOST, primary))
            until = time.monotonic() + 3 * CONNECT
            written: dict[str, bytes] = {}
            batch = 0
            while time.monotonic() < until:
                written.update(put(store, f"kept-{batch}"))
                batch += 1
                time.sleep(0.05)
            assert_stored_on(primary, written)
            deadline = time.monotonic() + 5
            while not any(f"keeping {HOST}:{primary}" in line for line in sentinel_log(caplog)):
                assert time.monotonic() < deadline, sentinel_log(caplog)
                time.sleep(0.05)
            assert fake.accepted_since(switched) >= 1, "no round of discovery followed the switch"


# -- the data server's credentials and certificate -------------------------------------------------


def test_a_wrong_data_password_behind_sentinel_is_an_authentication_error_naming_the_right_setting(
    group: SentinelGroup,
) -> None:
    url = f"redis+sentinel://:not-the-data-password@{','.join(real_sentinels(group))}/mymaster"
    began = time.monotonic()
    with pytest.raises(AuthenticationError) as caught:
        PagedRespStore(url, sentinel_password=SENTINEL_PASSWORD, page_size=PAGE, num_pages=4, timeout=TIMEOUT,
                       connect_timeout=CONNECT)
    assert time.monotonic() - began < TIMEOUT
    message = str(caught.value)
    assert f"{HOST}:{group.primary_port()}" in message and "the data server's" in message, message
    assert "not-the-data-password" not in message
    assert_no_secret(message)


@pytest.fixture
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCerts:
    if not server_supports_tls(server_binary()):
        if (os.environ.get("REDIS_TEST_SERVER") or "redis") == "redis":
            raise TlsUnsupported("Debian's redis-server has TLS")
        pytest.skip("this server has no TLS")
    return make_test_certs(tmp_path_factory.mktemp("sentinel-certs"))


def test_rediss_sentinel_checks_the_certificate_against_the_name_the_sentinel_gave_or_ssl_server_name(
    certs: TestCerts, tmp_path: Path
) -> None:
    good = RedisServer(tmp_path / "good", password=DATA_PASSWORD, tls=certs)
    wrong = RedisServer(tmp_path / "wrong", password=DATA_PASSWORD, tls=certs,
                        tls_server_cert=(certs.wrong_host_cert, certs.wrong_host_key))
    try:
        with FakeSentinel((HOST, good.port)) as fake:
            # Plain to the fake Sentinel, TLS to the data server it names.
            tls = {"sentinel_password": None, "sentinel_tls": False, "ssl_ca_certs": str(certs.ca)}

            def round_trip(**options: Any) -> None:
                with open_store([fake.address], "rediss", **tls, **options) as store:
                    values = put(store, "tls")
                    pages = store.allocate_many(len(values))
                    try:
                        assert all(store.get(list(values), pages))
                        assert [bytes(p.byte_array) for p in pages] == list(values.values())
                    finally:
                        for page in pages:
                            store.free(page)

            def refused(**options: Any) -> str:
                began = time.monotonic()
                with pytest.raises(TlsError) as caught:
                    open_store([fake.address], "rediss", **tls, **options)
                assert time.monotonic() - began < TIMEOUT
                message = str(caught.value)
                assert fake.address in message, message
                assert_no_secret(message)
                return message

            # Named by address, or by a name its certificate holds: verified, and served.
            round_trip()
            fake.names = ("localhost", good.port)
            round_trip()
            # A certificate for another name than the one the Sentinel gave: refused, clearly.
            fake.names = (HOST, wrong.port)
            message = refused()
            assert f"named {HOST}:{wrong.port}" in message and "wrong.example" in message, message
            assert "ssl_server_name" in message, message
            # ssl_server_name: the name checked instead of the Sentinel's, either way.
            round_trip(ssl_server_name="wrong.example")
            fake.names = (HOST, good.port)
            message = refused(ssl_server_name="wrong.example")
            assert f"named {HOST}:{good.port}" in message, message
            # At run time too: a switch to a node whose certificate names another host fails
            # the keys with the TLS error, and nothing goes there.
            with open_store([fake.address], "rediss", **tls) as store:
                put(store, "before-switch")
                wait_subscribed(fake)
                fake.names = (HOST, wrong.port)
                good.kill()
                fake.switch_master((HOST, wrong.port), (HOST, good.port))
                deadline = time.monotonic() + 15
                while True:
                    try:
                        put(store, "after-switch")
                    except BatchError as exc:
                        errors = [r for r in exc.results if isinstance(r, RespError)]
                        if errors and all(isinstance(e, TlsError) for e in errors):
                            assert "wrong.example" in str(errors[0]), str(errors[0])
                            break
                    assert time.monotonic() < deadline, "keys never failed with the TLS error"
                    time.sleep(0.1)
            assert all(wrong.command("EXISTS", f"after-switch-{i}") == 0 for i in range(4))
    finally:
        good.kill()
        wrong.kill()
