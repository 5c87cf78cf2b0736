"""Client failover with real processes: a durable subscriber (`tidings sub --token FILE --failover`)
whose broker is killed with kill -9 goes on at another broker from its token, by itself, and
prints every acknowledged event exactly once and in each publisher's order."""

import json
import subprocess
import sys

import pytest

from tests.integration.publisher import Publisher
from tidings.testing import LOCAL_LIVENESS, Cluster, wait_for

pytestmark = pytest.mark.integration


def lines(path):
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]


def test_a_durable_subscriber_fails_over_to_another_broker_when_its_own_is_killed(tmp_path):
    out, token = tmp_path / "sub.jsonl", tmp_path / "token"
    with Cluster(tmp_path / "cluster", 3, LOCAL_LIVENESS) as cluster, open(out, "w") as sink:
        origin, home, other = cluster[0], cluster[1], cluster[2]
        sub = subprocess.Popen([sys.executable, "-m", "tidings.cli.main", "sub", "fo/#", "--broker", home.address,
                                "--token", str(token), "--failover", other.address],
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


def test_a_plain_subscription_is_not_failed_over_and_closing_is_not_a_loss(tmp_path):
    """Only durable subscriptions resume elsewhere (a plain one would silently skip what was
    published meanwhile): a plain one ends with ConnectionClosed; and an application's own close
    starts no failover."""
    import asyncio

    from tidings.client import Client
    from tidings.core.errors import ConnectionClosed

    async def scenario(home, other):
        client = await Client.connect(home.address, failover=[other.address])
        plain = await client.subscribe("pl/#")
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
            client._call(client._client._move(other.address))
            assert client.address == other.address
            client.publish_many([("mv/x", b"after")] * 5)  # now through the other broker
            got = [ticks[0]] + [sub.get(timeout=10).tick for _ in range(24)]
            assert len(got) == len(set(got)), "an event came again after the move"
            with pytest.raises(TimeoutError):
                sub.get(timeout=1)
