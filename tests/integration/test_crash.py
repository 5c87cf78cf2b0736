"""kill -9 of a real broker process while publishes are in flight: nothing acknowledged is lost."""

import random
import threading

import pytest

from tidings import ConnectionClosed, sync
from tidings.testing import BrokerProcess, wait_for

pytestmark = pytest.mark.integration


def publish_until_lost(address, acked, stop):
    try:
        with sync.connect(address, service="crash", instance="pub") as c:
            n = 0
            while not stop.is_set():
                batch = [("crash/t", f"{n + i}".encode(), {"n": n + i}) for i in range(50)]
                for res, (_, payload, _) in zip(c.publish_many(batch), batch, strict=True):
                    acked.append((res.tick, payload))
                n += 50
    except (ConnectionClosed, OSError):
        pass


@pytest.mark.parametrize("commit", ["0", "1"], ids=["writer-commit", "loop-commit"])
@pytest.mark.parametrize("seed", [1, 2])
def test_kill_9_loses_no_acknowledged_event(tmp_path, seed, commit, monkeypatch):
    """Both commit paths (TIDINGS_SYNC_IN_LOOP, aio/storage_worker.py: every commit the writer's,
    or a quiet broker's in its loop)."""
    monkeypatch.setenv("TIDINGS_SYNC_IN_LOOP", commit)
    rng = random.Random(seed)
    acked: list[tuple[int, bytes]] = []
    broker = BrokerProcess(tmp_path / "b").start()
    try:
        for _ in range(3):
            stop = threading.Event()
            t = threading.Thread(target=publish_until_lost, args=(broker.address, acked, stop))
            target = len(acked) + rng.randint(200, 3000)
            t.start()
            wait_for(lambda target=target: len(acked) >= target, 30, what="acks")
            broker.kill()
            stop.set()
            t.join(30)
            broker.start()
        with sync.connect(broker.address) as c:
            logged = [(e.tick, e.payload) for e in c.read("crash/#", after=0)]
    finally:
        broker.stop()
    ticks = [t for t, _ in logged]
    assert ticks == sorted(set(ticks)), "the log holds each event once, in tick order"
    log = dict(logged)
    missing = [t for t, _ in acked if t not in log]
    assert missing == [], f"{len(missing)} acknowledged events lost"
    assert all(log[t] == p for t, p in acked)
    assert [t for t, _ in acked] == sorted(t for t, _ in acked), "ticks stay monotonic across restarts"
