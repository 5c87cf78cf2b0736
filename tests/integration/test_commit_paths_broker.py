"""A broker in this process with each commit path (TIDINGS_SYNC_IN_LOOP, aio/storage_worker.py):
the switch picks the path, publishes are acknowledged and read back, the log's commits are made
where the path says (the quiet ones the loop's when it may), and the broker stops cleanly."""

import asyncio
import time

import pytest

from tidings import sync
from tidings.aio import storage_worker
from tidings.aio.server import BrokerServer
from tidings.aio.storage_worker import INLINE_QUIET_NS, INLINE_RUN_COMMITS

pytestmark = pytest.mark.integration
EVENTS = 300


QUIET_EVENTS = 2 * INLINE_RUN_COMMITS  # published INLINE_QUIET_NS and more apart: quiet commits
QUIET_GAP_S = 10 * INLINE_QUIET_NS / 1e9


def _publish_and_read(address: str) -> tuple[list[int], list[bytes]]:
    with sync.connect(address, service="commit", instance="pub") as c:
        ticks = [r.tick for r in c.publish_many([("n/t", str(i).encode(), {}) for i in range(EVENTS // 2)])]
        ticks += [c.publish("n/t", str(i).encode()).tick for i in range(EVENTS // 2, EVENTS)]  # one at a time
        for i in range(EVENTS, EVENTS + QUIET_EVENTS):
            time.sleep(QUIET_GAP_S)  # the gap is what makes a commit quiet (not a wait for anything)
            ticks.append(c.publish("n/t", str(i).encode()).tick)
        return ticks, [e.payload for e in c.read("n/#", after=0)]


@pytest.mark.parametrize("commit", ["0", "1"], ids=["writer-commit", "loop-commit"])
def test_a_broker_commits_on_the_path_the_switch_says(tmp_path, commit, monkeypatch):
    monkeypatch.setenv("TIDINGS_SYNC_IN_LOOP", commit)
    monkeypatch.setattr(storage_worker, "INLINE_SYNC_NS_MAX", 10**12)  # a loaded machine's slow disk counts as quick
    in_loop = commit == "1"

    async def run() -> None:
        server = BrokerServer(tmp_path / "b", "127.0.0.1", 0)
        await server.start()
        try:
            worker = server.worker
            assert worker is not None
            ticks, payloads = await asyncio.wait_for(asyncio.to_thread(_publish_and_read, server.address), 60)
            assert ticks == sorted(set(ticks)) and len(ticks) == EVENTS + QUIET_EVENTS
            assert payloads == [str(i).encode() for i in range(EVENTS + QUIET_EVENTS)]
            assert worker.syncs > 0 and (worker.syncs_here > 0) is in_loop
        finally:
            await server.stop()
        assert worker.log.record_count == EVENTS + QUIET_EVENTS

    asyncio.run(run())
