"""A subscriber that stops reading does not grow the broker's memory, and later gets everything."""

import asyncio

import pytest

from tidings import Client
from tidings.testing import BrokerProcess

pytestmark = pytest.mark.integration

EVENTS = 60_000
PAYLOAD = b"p" * 1000  # 60 MB in all, far above the per-connection queue limit


def test_slow_subscriber_is_served_from_the_log_with_bounded_memory(tmp_path):
    cfg = {"send_queue_bytes_max": 1 << 20}
    with BrokerProcess(tmp_path / "b", cfg) as broker:
        async def main():
            slow = await Client.connect(broker.address, service="slow")
            slow.buffer_events_max = 500
            sub = await slow.subscribe("bulk/#")
            pub = await Client.connect(broker.address, service="fast")
            ticks = []
            for i in range(0, EVENTS, 1000):
                res = await pub.publish_many([("bulk/x", PAYLOAD, {"i": i + k}) for k in range(1000)])
                ticks += [r.tick for r in res]
            status = await pub.status()
            assert status["catchup_readers"] == 1 and status["blocked_connections"] == 1
            rss_published = broker.rss_bytes()
            got = []
            while len(got) < EVENTS:
                got += [e.tick for e in await asyncio.wait_for(sub.next_batch(), 20)]
            assert got == ticks
            # The subend turns live on SendDrained. Under uvloop that comes from a write-completion
            # callback run a loop iteration after the bytes reached the kernel, so a status request
            # can overtake it; each round trip below lets the broker's loop turn once more.
            for _ in range(50):
                status = await pub.status()
                if status["catchup_readers"] == 0:
                    break
            assert status["catchup_readers"] == 0, "the subscriber turned live again"
            await slow.close()
            await pub.close()
            return rss_published

        rss = asyncio.run(asyncio.wait_for(main(), 120))
        assert rss < 150 * 1024 * 1024, f"broker peak RSS {rss / 2**20:.0f} MiB"
        assert broker.rss_bytes() < 150 * 1024 * 1024
