"""Route advice with real brokers: a client of an overloaded broker moves to the neighbour it is
advised, with publishes in flight, and nothing it published is lost or duplicated."""

import asyncio
import contextlib
import signal
import time

import pytest

from tidings import Client, sync
from tidings.testing import LOCAL_LIVENESS, Cluster

pytestmark = pytest.mark.integration


def test_an_advised_publisher_moves_with_publishes_in_flight_and_loses_nothing(tmp_path):
    # a broker with more than two clients advises the others to move
    with Cluster(tmp_path, 2, {**LOCAL_LIVENESS, "clients_advised_above": 2}) as cluster:
        b0, b1 = cluster[0], cluster[1]
        p0, p1 = b0.status()["pubend"], b1.status()["pubend"]
        with sync.connect(b1.address, follow_advice=False) as reader, \
                sync.connect(b0.address, follow_advice=False), sync.connect(b0.address, follow_advice=False):
            sub = reader.subscribe("advice/#")

            async def publish():
                mover = await Client.connect(b0.address, service="mover")  # b0's third client
                # sent at once to b0, while the advice is being followed: the move waits for their acks
                first = await asyncio.gather(*(mover.publish("advice/x", str(i)) for i in range(200)))
                rest = [await mover.publish("advice/x", str(i)) for i in range(200, 400)]
                moves, address = mover.moves, mover.address
                await mover.close()
                return first + rest, moves, address

            sent, moves, address = asyncio.run(asyncio.wait_for(publish(), 60))
            assert moves == 1 and address == b1.address
            assert {r.pubend for r in sent[:200]} == {p0} and {r.pubend for r in sent[300:]} == {p1}
            got = [sub.get(timeout=20) for _ in sent]
            assert sorted((e.pubend, e.tick) for e in got) == sorted(sent)  # each once
            for pubend in (p0, p1):  # in each publisher's order
                ticks = [e.tick for e in got if e.pubend == pubend]
                assert ticks == sorted(ticks)
            assert sorted(int(e.payload) for e in got) == list(range(len(sent)))
            # b0 keeps its two other clients and the status request's own connection
            cluster.wait(lambda: b0.status()["clients"] == 3, what="the mover left b0")


def test_status_does_not_follow_advice_and_a_lone_broker_gives_none(tmp_path):
    with Cluster(tmp_path, 2, {**LOCAL_LIVENESS, "clients_advised_above": 1}) as cluster:
        b0 = cluster[0]
        with sync.connect(b0.address, follow_advice=False):
            for _ in range(3):  # each status connection is b0's second client: advised, and stays
                assert b0.status()["overlay"]["address"] == b0.address
            with sync.connect(b0.address) as follower:
                cluster.wait(lambda: follower.moves == 1, what="the follower moved")
                assert follower.address == cluster[1].address


def test_sigterm_drains_a_broker_whose_clients_move_on_without_loss(tmp_path):
    with Cluster(tmp_path, 3, LOCAL_LIVENESS) as cluster:
        leaving, staying = cluster[0], cluster[1]
        with sync.connect(staying.address, follow_advice=False) as reader:
            sub = reader.subscribe("drain/#")

            async def publish():
                mover = await Client.connect(leaving.address, service="mover")
                sent = [await mover.publish("drain/x", str(i)) for i in range(100)]
                started = asyncio.get_running_loop().time()
                leaving.proc.send_signal(signal.SIGTERM)
                while mover.moves == 0 and len(sent) < 5_000:
                    sent.append(await mover.publish("drain/x", str(len(sent))))
                moved_s = asyncio.get_running_loop().time() - started
                sent += [await mover.publish("drain/x", str(len(sent) + i)) for i in range(100)]
                address = mover.address
                await mover.close()
                return sent, address, moved_s

            sent, address, moved_s = asyncio.run(asyncio.wait_for(publish(), 60))
            assert address != leaving.address and moved_s < 5
            got = [sub.get(timeout=20) for _ in sent]
            assert sorted((e.pubend, e.tick) for e in got) == sorted(sent)
            assert leaving.proc.wait(timeout=10) == 0  # it stopped once its client had gone


def test_a_stopped_root_is_replaced_long_before_the_failure_timeout(tmp_path):
    """A broker that stops closes its links: its peers fail it at once (no keep-alive timeout), and
    its trees are repaired in well under a second on loopback."""
    from tests.integration.test_cluster_delivery import root_of

    slow_detection = {**LOCAL_LIVENESS, "keepalive_interval_ns": 3_000_000_000, "failure_timeout_ns": 10_000_000_000,
                      "heartbeat_interval_ns": 3_000_000_000, "parent_timeout_ns": 10_000_000_000,
                      "ping_interval_ns": 3_000_000_000}
    with Cluster(tmp_path, 3, slow_detection) as cluster:
        tree = next(f"leave{i}/#" for i in range(1 << 20) if root_of(cluster, f"leave{i}/#") is cluster[0])
        root, sub_at, pub_at = cluster[0], cluster[1], cluster[2]
        with sync.connect(sub_at.address, follow_advice=False) as reader, \
                sync.connect(pub_at.address, follow_advice=False) as writer:
            sub = reader.subscribe(tree)
            channel = tree[:-1] + "x"
            sent = [writer.publish(channel, "before")]
            assert sub.get(timeout=20).tick == sent[0].tick
            root.proc.send_signal(signal.SIGTERM)
            assert root.proc.wait(timeout=10) == 0
            stopped = time.monotonic()
            sent.append(writer.publish(channel, "after"))
            assert sub.get(timeout=20).tick == sent[1].tick
            repaired_s = time.monotonic() - stopped
            print(f"delivery resumed {repaired_s:.3f} s after the root stopped")
            assert repaired_s < 5  # the keep-alive and parent timeouts are 10 s
            for status in (sub_at.status(), pub_at.status()):
                assert root.address not in {leaf[1] for leaf in status["overlay"]["leaf_set"]}



async def received_once_in_order(sub, acked, got, timeout_s=30):
    """Take from `sub` into `got` until it holds every event of `acked` (PublishResults); each must
    have come once, in its pubend's order."""
    want = {(r.pubend, r.tick) for r in acked}
    try:
        async with asyncio.timeout(timeout_s):
            while not want <= {(e.pubend, e.tick) for e in got}:
                got += await sub.next_batch()
    except TimeoutError:
        missing = want - {(e.pubend, e.tick) for e in got}
        raise AssertionError(f"{len(missing)} of {len(want)} acknowledged events never came") from None
    keys = [(e.pubend, e.tick) for e in got]
    assert len(keys) == len(set(keys)), f"{len(keys) - len(set(keys))} events came twice"
    for pubend in {p for p, _ in keys}:
        ticks = [t for p, t in keys if p == pubend]
        assert ticks == sorted(ticks), f"events of {pubend} out of order"



def test_a_plain_subscriber_moved_by_a_drain_misses_nothing_published_during_the_move(tmp_path):
    """The move window of a plain subscription (core/session/cursor.py): the subscriber's broker is
    drained while it is behind (it stopped reading: what the old broker has not sent yet is the
    window) and a publisher on the broker it moves to goes on publishing. It used to subscribe
    again from "now" there, and missed everything of that broker's pubend it had not received."""

    async def scenario(leaving, staying):
        client = await Client.connect(leaving.address)  # follows advice
        client.buffer_events_max = 50  # past it, the client stops reading its connection
        sub = await client.subscribe("pm/#")
        got, acked = [], []
        payload = "x" * 16_000  # what the old broker holds back must exceed the sockets' buffers
        async with await Client.connect(staying.address, follow_advice=False) as pub:
            async def publish(until):
                while not until() and len(acked) < 50_000:
                    acked.extend(await asyncio.gather(*(pub.publish("pm/x", payload) for _ in range(20))))

            await publish(lambda: len(acked) >= 20)
            await received_once_in_order(sub, acked, got)
            await publish(lambda: len(acked) >= 3000)  # the subscriber takes nothing meanwhile
            leaving.proc.send_signal(signal.SIGTERM)
            moved, seen = asyncio.Event(), {}

            def on_move(*_):
                seen.update(sub.cursor.seen)  # what it had received from each pubend
                moved.set()

            client.on_move = on_move
            async with asyncio.timeout(20):
                while client.mode == "serving":  # it reads again until the advice comes; then stops
                    with contextlib.suppress(TimeoutError):
                        got += await asyncio.wait_for(sub.next_batch(10), 0.1)
                await moved.wait()
            behind = sum(1 for r in acked if r.tick > seen.get(r.pubend, -1))
            await publish(lambda: len(acked) >= 3200)
            await received_once_in_order(sub, acked, got)
        address = client.address
        await client.close()
        return address, behind

    # a small clock-skew allowance: "now" at the new broker reaches back less than the move takes
    with Cluster(tmp_path, 2, {**LOCAL_LIVENESS, "clock_skew_allowance_ns": 50_000_000}) as cluster:
        leaving, staying = cluster[0], cluster[1]
        address, behind = asyncio.run(asyncio.wait_for(scenario(leaving, staying), 60))
        assert address == staying.address
        assert leaving.proc.wait(timeout=10) == 0
        print(f"moved {behind} events behind the publisher, none missed or repeated")
