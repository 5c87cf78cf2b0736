"""The exactly-once sink without Spark: producer ids and sequences, the sink's schema and options,
rows to events, and a task's publishing loop against a broker that deduplicates as the real one does."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from pyspark.sql.types import (  # noqa: E402
    ArrayType,
    BinaryType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from tidings.client.client import DuplicateResult, PublishResult  # noqa: E402
from tidings.core.channels import validate_channel  # noqa: E402
from tidings.core.errors import BrokerError, EventError  # noqa: E402
from tidings.core.publish.dedup import PSEQ_MAX  # noqa: E402
from tidings.spark.options import ROWS_PER_PUBLISH_MAX, WriteOptions, parse_write_options  # noqa: E402
from tidings.spark.producer import (  # noqa: E402
    BATCHES_MAX,
    ROWS_MAX,
    SequenceError,
    check_write_id,
    key_seq,
    keyed_producer_id,
    producer_id,
    row_seq,
)
from tidings.spark.rows import RowError, SinkColumns, check_sink_schema, row_event, row_key  # noqa: E402
from tidings.spark.sink import SinkError, Task, arrow_rows, write_rows  # noqa: E402

OPTS = WriteOptions(broker="127.0.0.1:7400", write_id="w", rows_per_publish=3)
PLAIN = SinkColumns(channel=0, payload=1, attributes=2, key=None)
KEYED = SinkColumns(channel=0, payload=1, attributes=None, key=2)


class Broker:
    """A pubend's log with an unbounded dedup window: each (producer, seq) logged once, a repeat
    answered with the original's tick. Refuses channels the real broker refuses."""

    def __init__(self) -> None:
        self.log: list[tuple[str, bytes | str, dict[str, Any] | None]] = []
        self.ticks: dict[tuple[str, int], int] = {}
        self.opened = 0

    @contextmanager
    def connect(self) -> Iterator[Broker]:
        self.opened += 1
        yield self

    def publish_many(self, items: list[tuple[Any, ...]], *, producer: str | None = None) -> list[Any]:
        assert producer is not None
        results: list[Any] = []
        for channel, payload, attributes, seq in items:
            assert 0 <= seq <= PSEQ_MAX
            try:
                validate_channel(channel)
            except ValueError as exc:
                results.append(BrokerError(str(exc), "bad-channel"))
                continue
            tick = self.ticks.get((producer, seq))
            if tick is not None:
                results.append(DuplicateResult("p1", tick))
                continue
            self.log.append((channel, payload, attributes))
            self.ticks[(producer, seq)] = len(self.log)
            results.append(PublishResult("p1", len(self.log)))
        refused = next((r for r in results if isinstance(r, BrokerError)), None)
        if refused is not None:
            refused.results = results  # type: ignore[attr-defined]
            raise refused
        return results


def rows(count: int, start: int = 0) -> list[tuple[Any, ...]]:
    return [(f"out/{i % 3}", f"row {i}".encode(), [("i", i), ("gone", None)]) for i in range(start, start + count)]


# --- producer ids and sequences --------------------------------------------------------------------


@given(st.integers(0, BATCHES_MAX - 1), st.integers(0, ROWS_MAX - 1),
       st.integers(0, BATCHES_MAX - 1), st.integers(0, ROWS_MAX - 1))
def test_row_seqs_are_distinct_per_batch_and_row_and_fit_a_pseq(b1: int, r1: int, b2: int, r2: int) -> None:
    s1, s2 = row_seq(b1, r1), row_seq(b2, r2)
    assert 0 <= s1 <= PSEQ_MAX
    assert (s1 == s2) == ((b1, r1) == (b2, r2))


def test_consecutive_rows_have_consecutive_seqs_so_a_chunk_is_one_window_entry() -> None:
    assert [row_seq(7, r) for r in range(3)] == [(7 << 32), (7 << 32) + 1, (7 << 32) + 2]


def test_out_of_range_batches_and_rows_are_refused() -> None:
    with pytest.raises(SequenceError, match="repartition"):
        row_seq(0, ROWS_MAX)
    with pytest.raises(SequenceError, match="micro-batch id"):
        row_seq(BATCHES_MAX, 0)


def test_producer_ids_name_the_write_and_partition() -> None:
    assert producer_id("q-1", 0) == "spark/q-1/0"
    assert producer_id("q-1", 0) != producer_id("q-1", 1) != producer_id("q-2", 1)
    assert keyed_producer_id("q-1") == "spark/q-1/key"
    assert producer_id("é" * 100, 10_000_000).encode().__len__() <= 256


@given(st.text(min_size=1) | st.binary(min_size=1))
def test_key_seqs_are_stable_and_fit_a_pseq(key: str | bytes) -> None:
    assert key_seq(key) == key_seq(key)
    assert 0 <= key_seq(key) <= PSEQ_MAX


def test_key_seqs() -> None:
    assert key_seq(42) == 42  # an integer key is its own seq
    assert key_seq("order-7") == key_seq(b"order-7") != key_seq("order-8")
    for bad in (-1, PSEQ_MAX + 1, True, 1.5):
        with pytest.raises(SequenceError):
            key_seq(bad)  # type: ignore[arg-type]


def test_write_ids_fit_in_a_producer_id() -> None:
    assert check_write_id("nightly-2026-11-25") == "nightly-2026-11-25"
    for bad in ("", "  ", "x" * 201, "\ud800"):
        with pytest.raises(ValueError, match="writeId"):
            check_write_id(bad)


# --- options ---------------------------------------------------------------------------------------


def test_write_options() -> None:
    opts = parse_write_options({"Broker": "127.0.0.1:7400", "WRITEID": "n1", "rowsPerPublish": "10"},
                               streaming=False)
    assert (opts.broker, opts.write_id, opts.rows_per_publish, opts.fail_first_attempt) == \
        ("127.0.0.1:7400", "n1", 10, False)
    assert parse_write_options({"broker": "h:1", "checkpointLocation": "/cp", "path": "p"}, streaming=True) == \
        WriteOptions("h:1", None, 1000)  # Spark's own options are let through
    with pytest.raises(ValueError, match=r'"writeId" is for df\.write'):
        parse_write_options({"broker": "h:1", "writeId": "x"}, streaming=True)
    with pytest.raises(ValueError, match='"pattern" is an option of the tidings read'):
        parse_write_options({"broker": "h:1", "pattern": "a/#"}, streaming=False)
    with pytest.raises(ValueError, match="unknown option 'writeid2'"):
        parse_write_options({"broker": "h:1", "writeid2": "x"}, streaming=False)
    with pytest.raises(ValueError, match='"broker" is required'):
        parse_write_options({}, streaming=False)
    with pytest.raises(ValueError, match='"rowsPerPublish" must be between 1'):
        parse_write_options({"broker": "h:1", "rowsPerPublish": str(ROWS_PER_PUBLISH_MAX + 1)}, streaming=False)


# --- schema and rows -------------------------------------------------------------------------------


def schema(*fields: tuple[str, Any]) -> StructType:
    return StructType([StructField(name, data_type) for name, data_type in fields])


def test_sink_schema_positions() -> None:
    columns = check_sink_schema(schema(("key", LongType()), ("payload", StringType()), ("channel", StringType()),
                                       ("attributes", MapType(StringType(), DoubleType()))))
    assert columns == SinkColumns(channel=2, payload=1, attributes=3, key=0)
    assert check_sink_schema(schema(("channel", StringType()), ("payload", BinaryType()))) == \
        SinkColumns(0, 1, None, None)


@pytest.mark.parametrize(("fields", "message"), [
    ((("channel", StringType()),), "column 'payload' (binary or string) is required"),
    ((("channel", IntegerType()), ("payload", BinaryType())), "column 'channel' must be string, got int"),
    ((("channel", StringType()), ("payload", LongType())), "column 'payload' must be binary or string, got bigint"),
    ((("channel", StringType()), ("payload", BinaryType()), ("tick", LongType())), "unexpected column"),
    ((("channel", StringType()), ("payload", BinaryType()),
      ("attributes", MapType(StringType(), ArrayType(LongType())))), "column 'attributes' must be map<string, "),
    ((("channel", StringType()), ("payload", BinaryType()), ("key", BooleanType())),
     "column 'key' must be string, binary or an integer type, got boolean"),
])
def test_sink_schema_errors_are_one_line(fields: tuple[tuple[str, Any], ...], message: str) -> None:
    with pytest.raises(ValueError, match=r"^tidings sink: ") as info:
        check_sink_schema(schema(*fields))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_rows_to_events() -> None:
    assert row_event("a/b", None, None) == ("a/b", b"", None)
    assert row_event("a/b", bytearray(b"x"), [("k", 1), ("n", None)]) == ("a/b", b"x", {"k": 1})
    assert row_event("a/b", "text", {"n": None}) == ("a/b", "text", None)
    with pytest.raises(RowError, match="channel is null"):
        row_event(None, b"x")
    with pytest.raises(RowError, match="key is null"):
        row_key(None)


def test_arrow_rows_give_python_values() -> None:
    batch = pa.record_batch([pa.array(["a/b"]), pa.array([b"x"]),
                             pa.array([[("k", 1.5)]], type=pa.map_(pa.string(), pa.float64()))],
                            names=["channel", "payload", "attributes"])
    assert list(arrow_rows([batch])) == [("a/b", b"x", [("k", 1.5)])]


# --- a task's publishing loop ----------------------------------------------------------------------


def test_rows_are_published_in_chunks_with_their_names() -> None:
    broker = Broker()
    commit = write_rows(rows(7), PLAIN, Task("w", 2), OPTS, broker.connect)
    assert (commit.partition, commit.rows, commit.duplicates, commit.pubend) == (2, 7, 0, "p1")
    assert sorted(broker.ticks) == [("spark/w/2", s) for s in range(7)]
    assert broker.log[0] == ("out/0", b"row 0", {"i": 0})


def test_no_rows_open_no_connection() -> None:
    broker = Broker()
    assert write_rows([], PLAIN, Task("w", 0), OPTS, broker.connect).rows == 0
    assert broker.opened == 0


@settings(max_examples=60, deadline=None)
@given(count=st.integers(0, 40), chunk=st.integers(1, 8), batch=st.integers(0, 3), data=st.data())
def test_a_retry_after_a_failure_anywhere_publishes_each_row_once(count: int, chunk: int, batch: int,
                                                                  data: st.DataObject) -> None:
    """The first attempt dies after publishing any prefix of its chunks; the second publishes the
    whole partition again: every row is in the log once, and the retry's commit counts the rest as
    duplicates."""
    broker, opts = Broker(), WriteOptions("h:1", "w", chunk)
    published = data.draw(st.integers(0, count))

    def first_attempt() -> Iterator[tuple[Any, ...]]:
        yield from rows(count)[:published]
        raise RuntimeError("executor lost")

    with pytest.raises(RuntimeError):
        write_rows(first_attempt(), PLAIN, Task("w", 0, batch, 0), opts, broker.connect)
    logged_first = len(broker.log)
    commit = write_rows(rows(count), PLAIN, Task("w", 0, batch, 1), opts, broker.connect)
    assert sorted(p for _c, p, _a in broker.log) == sorted(p for _c, p, _a in rows(count))
    assert (commit.rows, commit.duplicates) == (count, logged_first)


def test_a_replayed_micro_batch_publishes_nothing_and_the_next_batch_publishes_anew() -> None:
    broker = Broker()
    write_rows(rows(5), PLAIN, Task("q", 0, batch=3), OPTS, broker.connect)
    replay = write_rows(rows(5), PLAIN, Task("q", 0, batch=3), OPTS, broker.connect)
    following = write_rows(rows(5, 5), PLAIN, Task("q", 0, batch=4), OPTS, broker.connect)
    assert (replay.duplicates, following.duplicates, len(broker.log)) == (5, 0, 10)


def test_the_test_option_fails_the_first_attempt_after_its_first_publish() -> None:
    broker, opts = Broker(), WriteOptions("h:1", "w", 3, fail_first_attempt=True)
    with pytest.raises(SinkError, match="testOnlyFailFirstAttempt: partition 0 fails after publishing 3 rows"):
        write_rows(rows(7), PLAIN, Task("w", 0, attempt=0), opts, broker.connect)
    commit = write_rows(rows(7), PLAIN, Task("w", 0, attempt=1), opts, broker.connect)
    assert (len(broker.log), commit.duplicates) == (7, 3)
    with pytest.raises(SinkError, match="after publishing 2 rows"):  # a single, last publish too
        write_rows(rows(2, 7), PLAIN, Task("w", 1, attempt=0), opts, broker.connect)


def test_keyed_rows_are_named_by_key_across_partitions_and_batches() -> None:
    broker = Broker()
    first = [("out/k", b"a", "order-1"), ("out/k", b"b", "order-2")]
    write_rows(first, KEYED, Task("q", 0, batch=0), OPTS, broker.connect)
    again = write_rows([("out/k", b"b", "order-2"), ("out/k", b"c", "order-3")], KEYED, Task("q", 1, batch=1),
                       OPTS, broker.connect)
    assert [p for _c, p, _a in broker.log] == [b"a", b"b", b"c"]
    assert again.duplicates == 1 and {p for p, _s in broker.ticks} == {"spark/q/key"}
    with pytest.raises(SinkError, match="row 1 of partition 0: its key is null"):
        write_rows([("out/k", b"a", "x"), ("out/k", b"b", None)], KEYED, Task("q", 0), OPTS, broker.connect)


def test_a_row_the_broker_refuses_fails_the_task_naming_it() -> None:
    broker = Broker()

    def refused_by_broker(items: list[tuple[Any, ...]], *, producer: str | None = None) -> list[Any]:
        return Broker.publish_many(broker, [(c.replace("bad", "a+b"), p, a, s) for c, p, a, s in items],
                                   producer=producer)

    broker.publish_many = refused_by_broker  # type: ignore[method-assign]
    table = rows(4)
    table[2] = ("bad", b"x", None)
    with pytest.raises(SinkError, match=r"^tidings sink: row 2 of partition 0: the broker refused its event: "
                                        r"channel 'a\+b' contains a wildcard"):
        write_rows(table, PLAIN, Task("w", 0), OPTS, broker.connect)
    assert len(broker.log) == 2  # the rows before it, in its chunk too: nothing after is published


def test_a_row_the_client_refuses_fails_the_task_naming_it() -> None:
    broker = Broker()

    def client_check(items: list[tuple[Any, ...]], *, producer: str | None = None) -> list[Any]:
        for channel, *_ in items:
            validate_channel(channel)
        return Broker.publish_many(broker, items, producer=producer)

    broker.publish_many = client_check  # type: ignore[method-assign]
    table = rows(5)
    table[4] = ("a/#", b"x", None)
    with pytest.raises(SinkError, match=r"^tidings sink: row 4 of partition 0: channel 'a/#' contains a wildcard"):
        write_rows(table, PLAIN, Task("w", 0), OPTS, broker.connect)
    with pytest.raises(SinkError, match="row 0 of partition 1: its channel is null"):
        write_rows([(None, b"x", None)], PLAIN, Task("w", 1), OPTS, broker.connect)


def test_an_oversized_payload_fails_the_task_naming_its_row() -> None:
    broker = Broker()
    broker.event_bytes_max = 10  # type: ignore[attr-defined]

    def client_check(items: list[tuple[Any, ...]], *, producer: str | None = None) -> list[Any]:
        if any(len(p.encode() if isinstance(p, str) else p) > 10 for _c, p, _a, _s in items):
            raise EventError("payload of 11 bytes exceeds event_bytes_max=10")
        return Broker.publish_many(broker, items, producer=producer)

    broker.publish_many = client_check  # type: ignore[method-assign]
    table = [("out/a", b"small", None), ("out/a", "é" * 6, None)]  # 12 bytes as UTF-8
    with pytest.raises(SinkError, match=r"row 1 of partition 0: its payload of 12 bytes exceeds the broker's "
                                        r"event_bytes_max=10"):
        write_rows(table, PLAIN, Task("w", 0), OPTS, broker.connect)
