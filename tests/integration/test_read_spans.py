"""A READ answered with the log's own bytes (SPAN) by a real broker process: the reader gets exactly
the events a READ answered record by record gives, once the first read showed the pattern keeps
at least a quarter of the records; a narrow pattern, a filter, or a reader that may not read every channel gets RECORDS
only; and a reader that stops taking spans holds a bounded number of them."""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
import pytest

from tidings import Client, sync
from tidings.core.channels import pattern_matches
from tidings.core.wire.messages import Records, Span
from tidings.storage import record
from tidings.testing import BrokerProcess

pytestmark = pytest.mark.integration

EVENTS = 12_000  # about 2 MiB of log: the first read (1 MiB) is tested record by record, then spans


def decoded(items: list[Any], pattern: str) -> list[list[Any]]:
    """The event records a reader keeps of a bulk read's items, as the Spark task does."""
    rows: list[list[Any]] = []
    position = 0
    for item in items:
        if isinstance(item, Records):
            rows += msgpack.unpackb(item.blob)
        else:
            assert isinstance(item, Span) and item.after >= position
            rows += [row for body in record.records_in(item.blob, item.after, item.through)
                     if pattern_matches(pattern, (row := msgpack.unpackb(body))[2])]
            position = item.through
        if rows:
            position = max(position, rows[-1][1])
    return rows


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A broker whose log holds EVENTS events, a tenth of them on c/z, 30 % on b/y, the rest on a/x;
    their ticks."""
    with BrokerProcess(tmp_path_factory.mktemp("spans") / "b") as broker:
        ticks: dict[str, list[int]] = {"a/x": [], "b/y": [], "c/z": []}
        with sync.connect(broker.address, service="pub") as client:
            for start in range(0, EVENTS, 1000):
                batch = [("c/z" if i % 10 == 5 else "b/y" if i % 3 == 0 else "a/x", b"p" * 100, {"i": i})
                         for i in range(start, start + 1000)]
                for (channel, _, _), result in zip(batch, client.publish_many(batch), strict=True):
                    ticks[channel].append(result.tick)
        yield broker, ticks


def read(broker: BrokerProcess, pattern: str, spans: bool, filter: str | None = None) -> list[Any]:
    with sync.connect(broker.address, service="reader", follow_advice=False) as client:
        end = int(client.status()["last_tick"])
        return list(client.read_records(pattern, filter=filter, after=0, end=end, spans=spans))


@pytest.mark.parametrize("pattern", ["a/#", "b/#"])
def test_spans_give_the_events_records_give(published, pattern):
    broker, ticks = published
    before = broker.status()
    items = read(broker, pattern, spans=True)
    kinds = [type(i).__name__ for i in items]
    assert kinds[0] == "Records" and "Span" in kinds, kinds  # the first read shows the pattern keeps 60 %, 30 %
    after = broker.status()  # the first read's events are counted, the spans' bytes (not their events)
    assert after["read_span_bytes"] - before["read_span_bytes"] == sum(len(i.blob) for i in items
                                                                        if isinstance(i, Span))
    assert after["events_delivered"] - before["events_delivered"] == items[0].count
    rows = decoded(items, pattern)
    assert [r[1] for r in rows] == ticks[{"a/#": "a/x", "b/#": "b/y"}[pattern]]
    assert rows == decoded(read(broker, pattern, spans=False), pattern)


@pytest.mark.parametrize(("pattern", "filter"), [("c/#", None), ("a/#", "i > 2")])
def test_a_narrow_pattern_or_a_filter_is_answered_record_by_record(published, pattern, filter):
    broker, ticks = published
    items = read(broker, pattern, spans=True, filter=filter)
    assert {type(i) for i in items} == {Records}
    expected = ticks["c/z"] if filter is None else ticks["a/x"][2:]  # i = 1 and 2 fail the filter
    assert [r[1] for r in decoded(items, pattern)] == expected


def test_a_reader_of_spans_holds_a_bounded_number_of_them(published):
    broker, ticks = published

    async def main() -> None:
        client = await Client.connect(broker.address, service="reader", follow_advice=False)
        client.buffer_events_max = 4000
        sub = await client.read_records("#", after=0, end=max(t[-1] for t in ticks.values()), spans=True)
        for _ in range(200):  # the first frames arrive and fill the buffer; bounded wait
            if client.reading_paused:
                break
            await asyncio.sleep(0.01)
        assert client.reading_paused
        waiting = sum(len(i.blob) if isinstance(i, Span) else i.count * 128 for i in sub.buffered)
        assert waiting < 4000 * 128 + 2 * 1024 * 1024  # the buffer's worth, and the frame that filled it
        items = []
        while batch := await asyncio.wait_for(sub.next_batch(), 20):
            items += batch
        assert len(decoded(items, "#")) == EVENTS  # everything arrives once the reader takes it
        await client.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_span_holding_a_corrupt_record_fails_the_reader_naming_it(tmp_path):
    """The broker no longer checks a span's records: the reader does, and fails its read."""
    pytest.importorskip("pyarrow")
    from types import SimpleNamespace

    from tidings.spark.arrow import arrow_schema
    from tidings.spark.planning import ReadError
    from tidings.spark.reading import read_batches

    broker = BrokerProcess(tmp_path / "b", {"segment_bytes_max": 32 * 1024}).start()
    try:
        with sync.connect(broker.address) as c:
            for _ in range(20):
                c.publish_many([("c/x", b"p" * 60, {"i": i}) for i in range(500)])
        broker.stop()
        segments = sorted((tmp_path / "b" / "log").glob("*.seg"))
        victim = segments[len(segments) * 3 // 4]  # well past the first read, which the broker tests
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0xFF
        victim.write_bytes(bytes(data))
        broker.start()
        opts = SimpleNamespace(pattern="c/#", filter=None, fail_on_data_loss=True)
        with sync.connect(broker.address, follow_advice=False) as c:
            end = int(c.status()["last_tick"])
            with pytest.raises(ReadError, match=r"a SPAN that is not whole valid records: .*"):
                for _ in read_batches(c, opts, c.pubend or "", 0, end, arrow_schema()):
                    pass
            assert c.publish("c/x", b"still serving").tick > end
    finally:
        broker.stop()


def test_each_publish_is_one_batch_record_in_the_log(published):
    """The broker logs each PUBLISH's events as one batch record (storage/record.py): the log's
    files hold a few records of many events each, not a record per event."""
    broker, ticks = published
    headers: list[tuple[int, int]] = []  # (flags, events) of each record
    for path in sorted((broker.data / "log").glob("*.seg")):
        data, pos = path.read_bytes(), 0
        while pos < len(data):
            length = record.HEADER.unpack_from(data, pos)[0]
            end = pos + record.HEADER_BYTES + (length & record.LENGTH_MASK)
            count = record.batch_count(data, pos, end) if length & record.BATCH else 1
            headers.append((length & ~record.LENGTH_MASK, count))
            pos = end
    assert sum(count for _, count in headers) == EVENTS == sum(map(len, ticks.values()))
    assert len(headers) <= EVENTS // 100 and all(flags == record.BATCH for flags, _ in headers), headers[:5]
