"""A broker in this process with each commit path (TIDINGS_NATIVE_COMMIT, aio/native_commit.py):
the switch picks the path, publishes are acknowledged and read back, the log's commits are made
where the path says, and the broker stops cleanly (the committer detached in the loop's thread)."""

import asyncio

import pytest

from tidings import sync
from tidings.aio import native_commit
from tidings.aio.server import BrokerServer

pytestmark = pytest.mark.integration
EVENTS = 300


def _publish_and_read(address: str) -> tuple[list[int], list[bytes]]:
    with sync.connect(address, service="native", instance="pub") as c:
        ticks = [r.tick for r in c.publish_many([("n/t", str(i).encode(), {}) for i in range(EVENTS // 2)])]
        ticks += [c.publish("n/t", str(i).encode()).tick for i in range(EVENTS // 2, EVENTS)]  # one at a time
        return ticks, [e.payload for e in c.read("n/#", after=0)]


@pytest.mark.parametrize("commit", ["0", "1"], ids=["writer-commit", "native-commit"])
def test_a_broker_commits_on_the_path_the_switch_says(tmp_path, commit, monkeypatch):
    monkeypatch.setenv("TIDINGS_NATIVE_COMMIT", commit)
    native = commit == "1" and native_commit.available()

    async def run() -> None:
        server = BrokerServer(tmp_path / "b", "127.0.0.1", 0)
        await server.start()
        try:
            worker = server.worker
            assert worker is not None and (worker.native is not None) is native
            ticks, payloads = await asyncio.wait_for(asyncio.to_thread(_publish_and_read, server.address), 60)
            assert ticks == sorted(set(ticks)) and len(ticks) == EVENTS
            assert payloads == [str(i).encode() for i in range(EVENTS)]
            assert worker.commits > 0 and (worker.syncs == 0) is native
        finally:
            await server.stop()
        assert worker.log.record_count == EVENTS

    asyncio.run(run())
