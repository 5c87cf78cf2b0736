"""The PySpark data source `tidings`: the batch read `spark.read.format("tidings")` (here), the
streaming read `spark.readStream.format("tidings")` (stream.py) and the exactly-once sink
`df.write` / `df.writeStream` `.format("tidings")` (sink.py).

Theory of operation. The read is planned once, on the driver: `partitions()` asks the broker for
its log bounds, fixes the end of the read at the durable tail, and cuts the requested ticks into
contiguous half-open ranges (see planning.py for why that makes the read a consistent snapshot that
sees each event once). Each Spark task opens its own connection and makes one bounded read of its
range, `(after, end]`; the broker sends the matching events in tick order, then END. A retried task
reads the same range again and gets the same events, so retries add no duplicates.

Gaps. If retention released part of a range, the broker says so with a GAP instead of silently
sending less. With failOnDataLoss=true (the default) the task fails with DataLossError; with false
it logs the tick range it skipped and reads on after it.

Every option is checked in `schema()` (as the read whose options they are parses them), so a bad
one fails `load()` on the driver rather than a task. Log lines go to the logger `tidings.spark`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, ClassVar, Protocol

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from tidings.core.errors import GapError
from tidings.core.event import Event
from tidings.spark.arrow import EVENT_SCHEMA, arrow_schema, check_schema, events_to_batches
from tidings.spark.options import (
    ReadOptions,
    check_options,
    parse_read_options,
    parse_stream_options,
    parse_write_options,
)
from tidings.spark.planning import DataLossError, ReadError, bounds_from_status, plan_read

logger = logging.getLogger("tidings.spark")

SERVICE = "spark"  # the source name the read's connections present to the broker


class ReadSettings(Protocol):
    """What a task's read needs of the options (batch or streaming)."""

    @property
    def pattern(self) -> str: ...

    @property
    def filter(self) -> str | None: ...

    @property
    def fail_on_data_loss(self) -> bool: ...


class BrokerClient(Protocol):
    """What the read needs of `tidings.sync`'s blocking client."""

    def status(self) -> dict[str, Any]: ...

    def read(
        self, pattern: str, *, filter: str | None = None, after: int = 0, end: int | None = None,
        on_gap: str = "raise",
    ) -> Iterator[Any]: ...

    def close(self) -> None: ...


def connect(opts: ReadOptions, instance: str) -> Any:
    """A context-managed blocking connection to the options' broker, with their credential and TLS
    (imported late: workers import this module)."""
    from tidings import sync  # noqa: PLC0415

    tls: Any = False
    if opts.tls_ca is not None:
        from tidings.aio.tls import client_context  # noqa: PLC0415

        tls = client_context(opts.tls_ca)
    return sync.connect(opts.broker, service=SERVICE, instance=instance, credential=opts.credential, tls=tls)


class TickRangePartition(InputPartition):
    """The ticks `(after, end]` one task reads; an empty range (end <= after) reads nothing."""

    def __init__(self, index: int, after: int, end: int) -> None:
        super().__init__((after, end))
        self.index = index
        self.after = after
        self.end = end


def read_events(client: BrokerClient, opts: ReadSettings, after: int, end: int) -> Iterator[Event]:
    """The events of `(after, end]` matching the read's pattern and filter, in tick order.

    A gap either fails the read (DataLossError) or, with failOnDataLoss=false, is logged and read
    past. The broker is a peer: an event outside the range or out of order fails the read rather
    than risk a duplicate row.
    """
    position = after
    skipped: list[tuple[int, int]] = []
    while position < end:
        try:
            items = client.read(opts.pattern, filter=opts.filter, after=position, end=end, on_gap="raise")
            for event in items:
                if not isinstance(event, Event) or not position < event.tick <= end:
                    raise ReadError(
                        f"the broker sent {_describe(event)} while reading ({position}, {end}] in tick order"
                    )
                position = event.tick
                yield event
        except GapError as gap:
            if opts.fail_on_data_loss:
                raise DataLossError(opts.pattern, gap.after_tick, gap.through_tick) from None
            if gap.through_tick <= position:
                raise ReadError(
                    f"the broker reported a gap ({gap.after_tick}, {gap.through_tick}] "
                    f"behind the read position {position}"
                ) from None
            lost = (max(gap.after_tick, position), min(gap.through_tick, end))  # the part in this range
            logger.warning(
                "tidings read of %r: skipped ticks (%d, %d], released by retention before they were "
                "read (failOnDataLoss=false)", opts.pattern, *lost,
            )
            skipped.append(lost)
            position = lost[1]
            continue
        break
    if skipped:
        logger.warning(
            "tidings read of %r, range (%d, %d]: skipped %d gap(s), %d ticks in all: %s",
            opts.pattern, after, end, len(skipped), sum(b - a for a, b in skipped),
            ", ".join(f"({a}, {b}]" for a, b in skipped),
        )


def _describe(item: object) -> str:
    return f"tick {item.tick}" if isinstance(item, Event) else f"{type(item).__name__} {item!r}"


class TidingsReader(DataSourceReader):
    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        with connect(self.opts, "planner") as client:
            status = client.status()
        plan = plan_read(self.opts.start_tick, self.opts.end_tick, bounds_from_status(status),
                         self.opts.partitions)
        if plan.lost is not None:
            lost_after, lost_through = plan.lost
            if self.opts.fail_on_data_loss:
                raise DataLossError(self.opts.pattern, lost_after, lost_through)
            logger.warning(
                "tidings read of %r: skipping ticks (%d, %d], %d ticks released by retention before "
                "the read (failOnDataLoss=false)",
                self.opts.pattern, lost_after, lost_through, lost_through - lost_after,
            )
        if not plan.ranges:
            return [TickRangePartition(0, 0, 0)]
        return [TickRangePartition(i, a, e) for i, (a, e) in enumerate(plan.ranges)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, TickRangePartition), partition
        if partition.end <= partition.after:
            return
        schema = arrow_schema(self.schema)
        with connect(self.opts, f"read-{partition.index}") as client:
            events = read_events(client, self.opts, partition.after, partition.end)
            yield from events_to_batches(events, schema)


class TidingsDataSource(DataSource):
    """`spark.read`, `spark.readStream`, `df.write` and `df.writeStream` `.format("tidings")`; see
    docs/spark.md."""

    # partitions when the option is not given; register() sets it from the session
    default_partitions: ClassVar[int] = 2

    @classmethod
    def name(cls) -> str:
        return "tidings"

    def read_options(self) -> ReadOptions:
        return parse_read_options(self.options, self.default_partitions)

    def schema(self) -> StructType:
        check_options(self.options)  # fail load() on the driver, not a task, when an option is wrong
        return EVENT_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        check_schema(schema)
        return TidingsReader(self.read_options(), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from tidings.spark.stream import TidingsStreamReader  # noqa: PLC0415

        check_schema(schema)
        return TidingsStreamReader(parse_stream_options(self.options, self.default_partitions), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """The sink (sink.py); the options and columns are checked here, on the driver."""
        from tidings.spark.rows import check_sink_schema  # noqa: PLC0415
        from tidings.spark.sink import TidingsWriter  # noqa: PLC0415

        if overwrite:
            raise ValueError('tidings sink: a broker\'s log is appended to, never overwritten: use .mode("append")')
        return TidingsWriter(parse_write_options(self.options, streaming=False), check_sink_schema(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from tidings.spark.rows import check_sink_schema  # noqa: PLC0415
        from tidings.spark.sink import TidingsStreamWriter  # noqa: PLC0415

        return TidingsStreamWriter(parse_write_options(self.options, streaming=True), check_sink_schema(schema))


def default_parallelism(spark: Any) -> int:
    """spark.default.parallelism as Spark itself resolves it (cores in local mode), else 2."""
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:  # Spark Connect has no SparkContext
        pass
    try:
        value = spark.conf.get("spark.default.parallelism", None)
        return max(1, int(value)) if value is not None else 2
    except Exception:
        return 2


def register(spark: Any, default_partitions: int | None = None) -> type[TidingsDataSource]:
    """Register the `tidings` format with `spark`; returns the registered class.

    Data sources are created in Python workers that cannot ask the session for its parallelism, so
    it is read here and carried in a subclass (pickled by value, with the data source).
    """
    partitions = default_partitions if default_partitions is not None else default_parallelism(spark)
    if partitions < 1:
        raise ValueError(f"tidings: default_partitions must be at least 1, got {partitions}")
    bound = type("TidingsDataSourceBound", (TidingsDataSource,), {
        "default_partitions": partitions,
        "__doc__": TidingsDataSource.__doc__,
    })
    spark.dataSource.register(bound)
    return bound
