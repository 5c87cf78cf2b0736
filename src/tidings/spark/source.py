"""The PySpark data source `tidings`: the batch read `spark.read.format("tidings")` (here), the
streaming read `spark.readStream.format("tidings")` (stream.py) and the exactly-once sink
`df.write` / `df.writeStream` `.format("tidings")` (sink.py).

Theory of operation. The read is planned once, on the driver. `partitions()` finds every pubend of
the overlay, with the broker that logs it and its log bounds, by walking the brokers' leaf sets
from the broker the user named (overlay.py); fixes the end of the read per pubend at its durable
tail; and cuts each pubend's requested ticks into contiguous half-open ranges (planning.py says
why that makes the read a consistent snapshot that sees each event once), grouped into tasks of
about equal event counts (planning.balance: a task may read ranges of several pubends). For each
range, a Spark task opens its own connection to the broker that logs its pubend, never redirected
elsewhere, checks that it still logs that pubend, and makes one bounded read (reading.py). A retried task reads
the same range again and gets the same events, so retries add no duplicates.

Gaps and missing brokers. If retention released part of a range, the broker says so with a GAP
instead of silently sending less. A pubend whose broker cannot be reached is still listed by the
overlay's pubend directory, with what its log held when last heard of (coverage.py): if that holds
events in the read's range, its absence would leave them out of the snapshot. With
failOnDataLoss=true (the default) either fails the read; with false it is logged and the rest is
read.

Pushdown. `register(spark, pushdown=True)` installs a reader that takes Spark's simple predicates on
tick, time, channel and pubend (pushdown.py); Spark's own check then requires
`spark.sql.python.filterPushdown.enabled`. It is off by default because Spark 4.3 keeps the reader
that took one query's predicates for later queries on the same DataFrame (docs/spark.md).

Every option is checked in `schema()` (as the read whose options they are parses them), so a bad
one fails `load()` on the driver rather than a task. Log lines go to the logger `tidings.spark`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar, NoReturn

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    Filter,
    InputPartition,
)
from pyspark.sql.types import StructType

from tidings.spark import coverage
from tidings.spark.arrow import EVENT_SCHEMA, arrow_schema, check_schema
from tidings.spark.guard import ImportGuarded
from tidings.spark.options import (
    ReadOptions,
    check_options,
    parse_read_options,
    parse_stream_options,
    parse_write_options,
)
from tidings.spark.overlay import SERVICE, Connect, connect, survey
from tidings.spark.planning import DataLossError, LogBounds, PubendRange, ReadError, plan_overlay_read
from tidings.spark.pushdown import Narrowing, narrow
from tidings.spark.reading import TickRangePartition, read_batches, read_range
from tidings.spark.workers import worker_python

__all__ = ["SERVICE", "TickRangePartition", "TidingsDataSource", "TidingsReader", "read_batches", "register"]

logger = logging.getLogger("tidings.spark")


class TidingsReader(ImportGuarded, DataSourceReader):
    def __init__(self, opts: ReadOptions, schema: StructType, connect_to: Connect = connect) -> None:
        self.opts = opts
        self.schema = schema
        self.connect_to = connect_to
        self.narrowing = Narrowing()
        self.skipped: list[coverage.Unread] = []  # pubends the last planning skipped (failOnDataLoss=false)

    def partitions(self) -> list[InputPartition]:
        if self.narrowing.empty:
            return [TickRangePartition(0, "", "", 0, 0)]
        found = survey(self.opts, self.connect_to, self._unreachable)
        wanted = self.narrowing.pubends
        logs = {p: (h.address, LogBounds(h.first_tick, h.last_tick or None, h.released_through, h.marks,
                                         h.records))
                for p, h in found.heads.items() if wanted is None or p in wanted}
        start, end = self.narrowing.bounds(self.opts.start_tick, self.opts.end_tick)
        if start is not None and end is not None and start > end:
            return [TickRangePartition(0, "", "", 0, 0)]
        missing = {p: m for p, m in found.missing.items() if wanted is None or p in wanted}
        bounds = self._per_pubend(missing) or dict.fromkeys(missing, (start, end))  # each one's own range
        unread = [u for p, (low, high) in sorted(bounds.items())
                  for u in coverage.unread_all({p: missing[p]}, 0 if low is None else max(low - 1, 0), high)]
        self.skipped = coverage.check(f"read of {self.opts.pattern!r}", unread, self.opts.fail_on_data_loss)
        plan = plan_overlay_read(start, end, logs, self.opts.partitions, self._per_pubend(logs))
        for pubend, lost_after, lost_through in plan.lost:
            if self.opts.fail_on_data_loss:
                raise DataLossError(self.opts.pattern, lost_after, lost_through, pubend)
            logger.warning(
                "tidings read of %r: skipping ticks (%d, %d] of pubend %s, %d ticks released by retention "
                "before the read (failOnDataLoss=false)",
                self.opts.pattern, lost_after, lost_through, pubend, lost_through - lost_after,
            )
        if not plan.ranges:
            return [TickRangePartition(0, "", "", 0, 0)]
        return [TickRangesPartition(i, task) if len(task) > 1 else
                TickRangePartition(i, task[0].pubend, task[0].address, task[0].after, task[0].end)
                for i, task in enumerate(plan.tasks)]

    def _per_pubend(self, logs: Mapping[str, object]) -> dict[str, tuple[int | None, int | None]] | None:
        """Each pubend's inclusive bounds where startingOffsets or endingOffsets name positions
        (a token's vector: events after its tick, through its tick), else None: the read's bounds
        apply to every pubend."""
        starting, ending = self.opts.starting, self.opts.ending
        if starting is None and ending is None:
            return None
        out = {}
        for pubend in logs:
            after = None if starting is None else starting.get(pubend)
            start = self.opts.start_tick if starting is None else None if after is None else after + 1
            end = self.opts.end_tick if ending is None else ending.get(pubend)
            out[pubend] = self.narrowing.bounds(start, end)
        return out

    def _unreachable(self, address: str, exc: BaseException) -> None:
        if self.opts.fail_on_data_loss:
            raise ReadError(
                f"tidings read of {self.opts.pattern!r}: broker {address} of the overlay is not reachable "
                f"({exc}), so the events its pubend logged cannot be read; retry when it is back, or set "
                '.option("failOnDataLoss", "false") to read the other pubends'
            ) from None
        logger.warning("tidings read of %r: broker %s of the overlay is not reachable (%s): the events its "
                       "pubend logged are left out (failOnDataLoss=false)", self.opts.pattern, address, exc)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, TickRangePartition), partition
        ranges = partition.ranges if isinstance(partition, TickRangesPartition) else (
            (partition.pubend, partition.address, partition.after, partition.end),)
        for pubend, address, after, end in ranges:
            yield from read_range(self.opts, self.connect_to, address, f"read-{partition.index}", pubend, after,
                                  end, arrow_schema(self.schema), self.narrowing.channel)


class TickRangesPartition(TickRangePartition):
    """One task of a balanced batch read (planning.balance) that reads several ranges, of one
    pubend or several, one after another; its first range is its TickRangePartition's."""

    def __init__(self, index: int, ranges: tuple[PubendRange, ...]) -> None:
        first = ranges[0]
        super().__init__(index, first.pubend, first.address, first.after, first.end)
        self.ranges = tuple((r.pubend, r.address, r.after, r.end) for r in ranges)
        self.value = tuple((r.pubend, r.after, r.end) for r in ranges)


class TidingsPushdownReader(TidingsReader):
    """The batch reader that takes Spark's pushed predicates (only with PUSHDOWN_CONF on)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self.narrowing, remaining = narrow(filters, self.opts.pattern)
        return remaining


class RefusedStreamReader(ImportGuarded, DataSourceStreamReader):
    """A streaming read whose options or schema are wrong: every call raises the ValueError that
    names the problem (stop() does nothing)."""

    def __init__(self, message: str) -> None:
        self.message = message

    def _refuse(self, *_: object, **__: object) -> NoReturn:
        raise ValueError(self.message)

    initialOffset = latestOffset = partitions = read = commit = _refuse

    def stop(self) -> None:
        pass


class TidingsDataSource(ImportGuarded, DataSource):
    """`spark.read`, `spark.readStream`, `df.write` and `df.writeStream` `.format("tidings")`; see
    docs/spark.md."""

    # partitions when the option is not given; register() sets it from the session
    default_partitions: ClassVar[int] = 2
    # whether the reader takes Spark's pushed predicates; register(pushdown=True) sets it
    pushdown: ClassVar[bool] = False
    # register()'s subclass is made at run time: a worker restores its instances as this class,
    # with the subclass's settings as the instance's own
    _guard_class = "TidingsDataSource"

    def _guard_state(self) -> dict[str, Any]:
        return {**self.__dict__, "default_partitions": self.default_partitions, "pushdown": self.pushdown}

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
        reader = TidingsPushdownReader if self.pushdown else TidingsReader
        return reader(self.read_options(), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from tidings.spark.stream import TidingsStreamReader  # noqa: PLC0415

        try:
            check_schema(schema)
            opts = parse_stream_options(self.options, self.default_partitions)
        except ValueError as exc:
            # PySpark 4.3's streaming runner calls reader.stop() after streamReader() raised, and
            # so reports "UnboundLocalError: cannot access local variable 'reader'" in place of the
            # error: the refusal is raised from the reader's first call instead
            return RefusedStreamReader(str(exc))
        return TidingsStreamReader(opts, schema)

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


def register(
    spark: Any, default_partitions: int | None = None, *, pushdown: bool = False,
) -> type[TidingsDataSource]:
    """Register the `tidings` format with `spark`; returns the registered class.

    Data sources are created in Python workers that cannot ask the session for its parallelism, so
    it is read here and carried in a subclass (pickled by value, with the data source), with
    `pushdown` (the reader that takes Spark's predicates, see the module doc). On a local master,
    the Python workers of this data source run an interpreter that can import tidings (workers.py).
    """
    partitions = default_partitions if default_partitions is not None else default_parallelism(spark)
    if partitions < 1:
        raise ValueError(f"tidings: default_partitions must be at least 1, got {partitions}")
    bound = type("TidingsDataSourceBound", (TidingsDataSource,), {
        "default_partitions": partitions,
        "pushdown": pushdown,
        "__doc__": TidingsDataSource.__doc__,
    })
    with worker_python(spark):
        spark.dataSource.register(bound)
    return bound
