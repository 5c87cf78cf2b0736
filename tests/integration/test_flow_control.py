"""A subscriber that stops reading does not grow the broker's memory, and later gets everything."""

import asyncio

import msgpack
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


def test_a_bulk_read_stops_reading_the_socket_while_its_records_wait(tmp_path):
    """A task that decodes slowly holds at most buffer_events_max events and a frame in memory."""
    with BrokerProcess(tmp_path / "b") as broker:
        async def main():
            client = await Client.connect(broker.address, service="reader", follow_advice=False)
            ticks = []
            for i in range(0, 20_000, 1000):
                ticks += [r.tick for r in await client.publish_many([("bulk/x", b"p" * 100, {"i": i + k})
                                                                     for k in range(1000)])]
            client.buffer_events_max = 4000
            sub = await client.read_records("bulk/#", after=0, end=ticks[-1])
            for _ in range(200):  # the first frames arrive and fill the buffer; bounded wait
                if client.reading_paused:
                    break
                await asyncio.sleep(0.01)
            assert client.reading_paused
            waiting = sum(r.count for r in sub.buffered)
            assert 4000 < waiting < 4000 + 7000  # the buffer, and the frame that filled it
            got = []
            while batch := await asyncio.wait_for(sub.next_batch(), 20):
                got += [f[1] for r in batch for f in msgpack.unpackb(r.blob)]
            assert got == ticks
            await client.close()

        asyncio.run(asyncio.wait_for(main(), 60))
