"""The Python client against a real broker process: pipelining, batches, filters, start points."""

import asyncio
import datetime as dt

import pytest

from tidings import BrokerError, Client, ConnectionClosed, GapError, sync
from tidings.core.errors import ChannelError, FilterError

pytestmark = pytest.mark.integration


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_pipelined_publishes_share_frames_and_all_get_durable_ticks(broker):
    async def main():
        async with await Client.connect(broker.address, service="t", instance="1") as c:
            sub = await c.subscribe("load/#", filter="n >= 0")
            futures = [c.publish(f"load/{i % 7}", str(i), {"n": i}) for i in range(3000)]
            results = await asyncio.gather(*futures)
            ticks = [r.tick for r in results]
            assert ticks == sorted(ticks) and len(set(ticks)) == 3000
            assert {r.pubend for r in results} == {c.pubend}
            got = []
            while len(got) < 3000:
                got += await asyncio.wait_for(sub.next_batch(), 10)
            assert [e.tick for e in got] == ticks
            assert [e.payload for e in got[:3]] == [b"0", b"1", b"2"]
            assert got[5].service == "t" and got[5].instance == "1"

    run(main())


def test_filters_and_start_points(broker):
    async def main():
        async with await Client.connect(broker.address) as c:
            first = await c.publish_many([("m/a", b"", {"v": i, "site": "eu" if i % 2 else "us"})
                                          for i in range(10)])
            mid = first[4].tick
            when = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
            s_after = await c.subscribe("m/#", filter='site = "eu"', start=mid)
            s_time = await c.subscribe("m/#", start=when)
            s_now = await c.subscribe("m/+")
            later = await c.publish("m/a", b"", {"v": 10, "site": "eu"})
            got = []
            while len(got) < 4:
                got += await asyncio.wait_for(s_after.next_batch(), 10)
            assert [e.tick for e in got] == [first[5].tick, first[7].tick, first[9].tick, later.tick]
            assert [e.tick for e in await asyncio.wait_for(s_now.next_batch(), 10)] == [later.tick]
            with pytest.raises(TimeoutError):  # nothing from the future yet
                await asyncio.wait_for(s_time.next_batch(), 0.3)

    run(main())


def test_errors_surface_as_exceptions(broker):
    async def main():
        async with await Client.connect(broker.address) as c:
            with pytest.raises(ChannelError):
                c.publish("a/#", b"")
            with pytest.raises(FilterError) as info:
                await c.subscribe("a", filter="x in ()")
            assert info.value.position >= 0
            sub = await c.subscribe("ok")
            assert sub.position is not None

    run(main())


def test_connect_errors():
    async def main():
        with pytest.raises(ConnectionClosed, match="cannot connect"):
            await Client.connect("127.0.0.1:1", timeout=2)

    run(main())


def test_sync_facade_and_gap_modes(tmp_path):
    from tidings.testing import BrokerProcess

    cfg = {"segment_bytes_max": 4096, "retention_bytes_max": 8192, "retention_check_interval_ns": 100_000_000}
    with BrokerProcess(tmp_path / "b", cfg) as broker, sync.connect(broker.address) as c:
        acks = []
        for k in range(20):  # segments roll between appends, so publish in several batches
            acks += c.publish_many([("r", b"x" * 200, {"i": 10 * k + i}) for i in range(10)])
        from tidings.testing import wait_for

        # retention runs every 100 ms and may take more than one pass to come under its bound
        wait_for(lambda: c.status()["released_through"] > 0 and c.status()["log_bytes"] <= 8192 + 4096 + 1024, 15,
                 what="retention down to its bound")
        st = c.status()
        with pytest.raises(GapError) as info:
            list(c.read("r", after=0))
        assert info.value.through_tick == st["released_through"]
        items = list(c.read("r", after=0, on_gap="event"))
        assert items[0].after == 0 and items[0].through == st["released_through"]
        assert [e.tick for e in items[1:]] == [a.tick for a in acks if a.tick > st["released_through"]]
        events = list(c.read("r", after=0, on_gap="skip"))
        assert len(c.gaps_skipped) == 1 and len(events) == len(items) - 1
        from_start = c.subscribe("r", start="start")
        first = from_start.get(10)
        assert first.tick > st["released_through"]
        from_start.close()


def test_rejected_publish_raises_broker_error(tmp_path):
    from tidings.testing import BrokerProcess

    with BrokerProcess(tmp_path / "b", {"event_bytes_max": 100, "frame_bytes_max": 8192}) as broker:
        async def main():
            async with await Client.connect(broker.address) as c:
                c._session.event_bytes_max = 10_000  # get past the client's own check
                with pytest.raises(BrokerError) as info:
                    await c.publish("a", b"x" * 200)
                assert info.value.code == "event-too-large"
                assert (await c.publish("a", b"ok")).tick > 0

        run(main())


def readme_python_block(containing):
    """The README's ```python block that contains `containing`, dedented (it may sit in a list)."""
    import re
    import textwrap
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    blocks = [textwrap.dedent(b) for b in re.findall(r"^ *```python\n(.*?)^ *```", text, re.S | re.M)]
    (block,) = [b for b in blocks if containing in b]
    return block


def test_the_readme_read_records_example_runs(broker):
    """The README's read_records example, run as it is written, counts what was published."""
    namespace = {}
    exec(compile(readme_python_block("read_records("), "README.md", "exec"), namespace)
    with sync.connect(broker.address) as client:
        client.publish_many([("readme/a", b"1", {})] * 120 + [("other/b", b"2", {})] * 5)
    assert run(namespace["count_logged"](broker.address, "readme/#")) == 120
    assert run(namespace["count_logged"](broker.address, "#")) == 125
