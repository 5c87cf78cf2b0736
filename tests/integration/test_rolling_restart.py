"""A rolling restart: every broker of a cluster stopped with SIGTERM (drain: its clients are advised
to move, and the client library moves them, subscriptions and all) and started again in turn,
under steady publishing. A durable subscriber loses and repeats nothing; a plain one repeats
nothing; the publisher's longest pause between two acknowledged events stays within the bound
docs/operations.md gives."""

import os
import signal
import threading
import time

import pytest

from tidings import sync
from tidings.core.errors import TidingsError
from tidings.testing import LOCAL_LIVENESS, Cluster, wait_for

pytestmark = pytest.mark.integration

NOT_BACK_S = 1.0  # a restart that returns at the ready line does so within milliseconds
PAUSE_BOUND_S = 6.0  # docs/operations.md#rolling-restarts: the drain timeout (5 s) and a reconnect


class Consumer(threading.Thread):
    def __init__(self, address, durable):
        super().__init__(daemon=True)
        self.client = sync.connect(address, service="roller", request_timeout=None)
        self.sub = self.client.subscribe("roll/#", durable=durable) if durable else self.client.subscribe("roll/#")
        self.got = []
        self.error = None
        self.stopping = False

    def run(self):
        try:
            while not self.stopping:
                try:
                    event = self.sub.get(timeout=0.2)
                except TimeoutError:
                    continue
                if event is None:
                    return
                self.got.append((event.pubend, event.tick))
        except TidingsError as exc:
            self.error = exc


class Producer(threading.Thread):
    def __init__(self, address):
        super().__init__(daemon=True)
        self.client = sync.connect(address, service="roller-pub", request_timeout=30)
        self.acked = []
        self.longest_pause_s = 0.0
        self.error = None
        self.stopping = False

    def run(self):
        last = time.monotonic()
        try:
            while not self.stopping:
                results = self.client.publish_many([("roll/x", b"p")] * 5)
                now = time.monotonic()
                self.longest_pause_s = max(self.longest_pause_s, now - last)
                last = now
                self.acked += [(r.pubend, r.tick) for r in results]
                time.sleep(0.01)  # a steady rate, not synchronisation
        except TidingsError as exc:
            self.error = exc


def test_a_rolling_restart_loses_nothing_for_durable_subscribers_and_pauses_publishing_briefly(tmp_path):
    with Cluster(tmp_path / "cluster", 3, LOCAL_LIVENESS) as cluster:
        durable = Consumer(cluster[0].address, True)
        plain = Consumer(cluster[2].address, False)
        producer = Producer(cluster[1].address)
        for thread in (durable, plain, producer):
            thread.start()
        try:
            for broker in cluster.brokers:
                before = len(producer.acked)
                # back in the overlay before the next one drains, as `tidings cluster restart` waits
                assert cluster.restart(broker) == 0, "a drained broker exits 0"
                wait_for(lambda before=before: len(producer.acked) > before + 100 or producer.error, 60,
                         what="publishing went on after the restart")
                assert producer.error is None, (producer.error, broker.address, producer.client.address,
                                                producer.client.moves, [b.address for b in cluster.brokers])
            moves = (durable.client.moves, plain.client.moves, producer.client.moves)
            producer.stopping = True
            producer.join(30)
            acked = set(producer.acked)
            wait_for(lambda: set(durable.got) >= acked or durable.error, 60, what="the durable subscriber got all")
        finally:
            producer.stopping = durable.stopping = plain.stopping = True
            for c in (durable, plain, producer):
                c.join(10)
                c.client.close()
        assert durable.error is None and plain.error is None, (durable.error, plain.error)
        assert all(m >= 1 for m in moves), moves  # each moved at least once (its broker drained)
        assert len(durable.got) == len(set(durable.got)), "a durable subscriber got an event twice"
        assert set(durable.got) == acked
        for got in (durable.got, plain.got):
            for pubend in {p for p, _ in got}:
                ticks = [t for p, t in got if p == pubend]
                assert ticks == sorted(ticks), f"out of order from {pubend}"
        assert len(plain.got) == len(set(plain.got)), "a plain subscriber got an event twice"
        assert producer.longest_pause_s < PAUSE_BOUND_S, producer.longest_pause_s
        print(f"rolling restart: {len(acked)} events, durable got {len(durable.got)}, plain got {len(plain.got)}, "
              f"longest publish pause {producer.longest_pause_s:.2f} s, moves {moves}")


def test_a_restart_returns_only_once_the_broker_is_back_in_the_overlay(tmp_path):
    """The rolling restart's race, played in the bad order on purpose: the restarted broker listens
    (its ready line) while the only member it can join through is frozen, so it cannot have joined.
    A restart that returned then would let the next drain stop that member, and the last broker
    would drain with nobody to advise its clients to (they got ConnectionClosed in 3 of 70 runs)."""
    with Cluster(tmp_path / "cluster", 2, LOCAL_LIVENESS) as cluster:
        member, restarted = cluster.brokers
        done: list[int] = []
        thread = threading.Thread(target=lambda: done.append(cluster.restart(restarted)), daemon=True)
        os.kill(member.pid, signal.SIGSTOP)
        try:
            thread.start()
            wait_for(lambda: not (cluster.status(restarted) or {"overlay": {"joined": True}})["overlay"]["joined"],
                     30, what="the restarted broker listening, not joined")
            with pytest.raises(TimeoutError):  # it cannot join while the member is frozen: nor return
                wait_for(lambda: done, NOT_BACK_S, what="the restart returned")
        finally:
            os.kill(member.pid, signal.SIGCONT)
        thread.join(60)
        assert done == [0]
        assert (restarted.status()["overlay"] or {}).get("joined")
