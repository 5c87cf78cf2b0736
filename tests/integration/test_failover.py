"""Client failover with real processes: a subscriber (`tidings sub --failover`, durable with
`--token FILE` or plain) whose broker is killed with kill -9 goes on at another broker, by itself,
and prints every acknowledged event exactly once and in each publisher's order."""

import asyncio
import json
import signal
import subprocess
import sys
import time

import pytest

from tests.integration.publisher import Publisher
from tidings.client import Client
from tidings.core.errors import ConnectionClosed
from tidings.testing import LOCAL_LIVENESS, Cluster, wait_for

pytestmark = pytest.mark.integration


def lines(path):
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]


@pytest.mark.parametrize("kind", ["token", "plain"])
def test_a_subscriber_fails_over_to_another_broker_when_its_own_is_killed(tmp_path, kind):
    """`--token FILE` resumes from the token; a plain subscription after the last event printed."""
    out, token = tmp_path / "sub.jsonl", tmp_path / "token"
    durable = ["--token", str(token)] if kind == "token" else []
    with Cluster(tmp_path / "cluster", 3, LOCAL_LIVENESS) as cluster, open(out, "w") as sink:
        origin, home, other = cluster[0], cluster[1], cluster[2]
        sub = subprocess.Popen([sys.executable, "-m", "tidings.cli.main", "sub", "fo/#", "--broker", home.address,
                                *durable, "--failover", other.address],
                               stdout=sink, stderr=subprocess.PIPE, text=True)
        publisher = Publisher(origin.address, "fo/x")
        try:
            assert "subscribed" in sub.stderr.readline()
            publisher.start()
            wait_for(lambda: len(lines(out)) >= 100, 30, what="events before the kill")
            home.kill()
            publisher.wait_acks(300)
            publisher.stop()
            acked = {(pubend, tick) for pubend, tick, _ in publisher.acked}
            wait_for(lambda: acked <= {(e["pubend"], e["tick"]) for e in lines(out)}, 30,
                     what="every acknowledged event printed after the failover")
            assert sub.poll() is None, "the subscriber exited instead of failing over"
        finally:
            if publisher.is_alive():
                publisher.stop()
            sub.kill()
            sub.wait(10)
        said = sub.stderr.read()
    assert f"tidings: moved from broker {home.address} to {other.address} (failover: " in said, said
    got = [(e["pubend"], e["tick"]) for e in lines(out)]
    assert len(got) == len(set(got)), f"{len(got) - len(set(got))} events printed twice"
    assert got == sorted(got), "events out of order"
    assert set(got) == acked


def test_a_total_order_subscription_is_not_failed_over_and_closing_is_not_a_loss(tmp_path):
    """A total-order subscription starts again only from now (it would silently skip what was
    published meanwhile): it ends with ConnectionClosed; and an application's own close starts no
    failover. (Durable subscriptions and plain ones in publisher order fail over.)"""

    async def scenario(home, other):
        client = await Client.connect(home.address, failover=[other.address])
        plain = await client.subscribe("pl/#", order="total")
        home.kill()
        with pytest.raises(ConnectionClosed):
            async with asyncio.timeout(10):
                await plain.next_batch()
        assert client.failovers == 0
        closing = await Client.connect(other.address, failover=[other.address, home.address])
        durable = await closing.subscribe("pl/#", durable=True)
        await closing.close()
        with pytest.raises(ConnectionClosed):
            await durable.next_batch()
        assert closing.failovers == 0

    with Cluster(tmp_path / "cluster", 2, LOCAL_LIVENESS) as cluster:
        asyncio.run(scenario(cluster[0], cluster[1]))


def test_a_move_resumes_after_what_the_blocking_client_holds_but_has_not_returned_yet(tmp_path):
    """The blocking client takes events from the connection in batches and returns them one by one;
    a move (or failover) must resume after the whole batch, not after what `get` has returned so
    far, or the new broker sends the rest of the batch again (seen in the rolling-restart test)."""
    from tidings import sync

    with Cluster(tmp_path / "cluster", 2, LOCAL_LIVENESS) as cluster:
        origin, other = cluster[0], cluster[1]
        with sync.connect(origin.address, follow_advice=False) as client, \
                client.subscribe("mv/#", durable=True) as sub:
            ticks = [r.tick for r in client.publish_many([("mv/x", b"e")] * 20)]
            assert sub.get(timeout=10).tick == ticks[0]  # the other 19 wait in the blocking client
            assert client.move(other.address)
            assert client.address == other.address
            client.publish_many([("mv/x", b"after")] * 5)  # now through the other broker
            got = [ticks[0]] + [sub.get(timeout=10).tick for _ in range(24)]
            assert len(got) == len(set(got)), "an event came again after the move"
            with pytest.raises(TimeoutError):
                sub.get(timeout=1)


SILENCE_S = 2.0  # the subscriber's broker_silence in the test below
FAILOVER_SLACK_S = 3.0  # beyond it, for the failover's own connection on a loaded machine


def test_a_durable_subscriber_fails_over_when_its_broker_goes_silent(tmp_path):
    """SIGSTOP leaves the subscriber's connection open and silent (no RST): without a heartbeat the
    client would hold it until its lease ran out at the broker (30 s). With `failover`, the client
    sends a quiet broker HEARTBEAT and fails over once it heard nothing for `broker_silence`: within that
    bound (plus the new connection), and missing nothing acknowledged meanwhile."""

    async def scenario(origin, home, other):
        client = await Client.connect(home.address, failover=[other.address], broker_silence=SILENCE_S,
                                      follow_advice=False)
        moved = asyncio.Event()
        client.on_move = lambda *_: moved.set()
        sub = await client.subscribe("si/#", durable=True)
        got = []
        async with await Client.connect(origin.address, follow_advice=False) as pub:
            acked = [await pub.publish("si/x", b"before") for _ in range(20)]
            while len(got) < 20:
                got += await asyncio.wait_for(sub.next_batch(), 10)
            home.proc.send_signal(signal.SIGSTOP)
            stopped = time.monotonic()
            acked += [await pub.publish("si/x", f"during{i}") for i in range(20)]
            await asyncio.wait_for(moved.wait(), SILENCE_S + FAILOVER_SLACK_S)
            took = time.monotonic() - stopped
            acked += [await pub.publish("si/x", f"after{i}") for i in range(20)]
            want = {(r.pubend, r.tick) for r in acked}
            async with asyncio.timeout(30):
                while not want <= {(e.pubend, e.tick) for e in got}:
                    got += await sub.next_batch()
        assert client.address == other.address and client.failovers == 1
        await client.close()
        keys = [(e.pubend, e.tick) for e in got]
        assert len(keys) == len(set(keys)), "an event came twice"
        assert keys == sorted(keys), "events out of order"
        return took

    with Cluster(tmp_path / "cluster", 3, LOCAL_LIVENESS) as cluster:
        origin, home, other = cluster[0], cluster[1], cluster[2]
        try:
            took = asyncio.run(scenario(origin, home, other))
        finally:
            home.proc.send_signal(signal.SIGCONT)  # before the cluster stops it
    print(f"failed over {took:.2f} s after the broker went silent (broker_silence={SILENCE_S:g} s)")


def test_a_publisher_only_client_fails_over(tmp_path):
    """A client with no subscription (a publisher) and `failover` goes on at another broker when its
    own is killed: publishes in flight then fail (their outcome is unknown), later ones go to the
    other broker. (It used to end with ConnectionClosed.)"""

    async def scenario(home, other):
        client = await Client.connect(home.address, failover=[other.address], follow_advice=False)
        first = await client.publish("po/x", b"first")
        home.kill()
        async with asyncio.timeout(20):
            while client.failovers == 0:
                try:
                    await client.publish("po/x", b"in doubt")  # fails while the loss is noticed
                except ConnectionClosed:
                    await asyncio.sleep(0.05)
            later = await client.publish("po/x", b"later")
        await client.close()
        return first, later

    with Cluster(tmp_path / "cluster", 2, LOCAL_LIVENESS) as cluster:
        first, later = asyncio.run(scenario(cluster[0], cluster[1]))
        assert first.pubend != later.pubend and later.tick > 0


def test_a_plain_subscriber_fails_over_and_misses_nothing(tmp_path):
    """A plain subscription in publisher order fails over as a durable one does (kill -9 of its
    broker): it resumes after what it received from each pubend (core/session/cursor.py), so what
    was published while it was away comes, once and in order. (It used to end with ConnectionClosed.)"""
    from tests.integration.test_route_advice import received_once_in_order

    async def scenario(origin, home, other):
        client = await Client.connect(home.address, failover=[other.address], follow_advice=False)
        moved = asyncio.Event()
        client.on_move = lambda *_: moved.set()
        sub = await client.subscribe("pf/#")
        got = []
        async with await Client.connect(origin.address, follow_advice=False) as pub:
            acked = [await pub.publish("pf/x", b"before") for _ in range(20)]
            await received_once_in_order(sub, acked, got)
            home.kill()
            acked += [await pub.publish("pf/x", f"during{i}") for i in range(50)]
            await asyncio.wait_for(moved.wait(), 20)
            acked += [await pub.publish("pf/x", f"after{i}") for i in range(20)]
            await received_once_in_order(sub, acked, got)
        assert client.address == other.address and client.failovers == 1
        await client.close()

    with Cluster(tmp_path / "cluster", 3, LOCAL_LIVENESS) as cluster:
        asyncio.run(scenario(cluster[0], cluster[1], cluster[2]))
