"""What one Spark task does, for the batch and the streaming read alike: one bounded read of the
ticks `(after, end]` of one pubend, at the broker that logs it, as Arrow record batches.

Theory of operation. The task connects to the broker that logs the pubend (never redirected by
route advice, overlay.py), checks that it still logs that pubend, and asks for the matching events
of its range in bulk (READ); the broker sends their records as logged, in tick order, many to a
RECORDS frame (at most about 1 MiB), then END; the task decodes each frame straight into one Arrow
record batch (arrow.records_to_batch): no Event objects, nothing per event on the client's event
loop. Where the broker may (no filter, a reader allowed every channel, a pattern that keeps most
records), it sends the log's own bytes instead (SPAN, core/subscription/subend.py), and the task
checks the records' checksums and tests the pattern itself (arrow.span_to_batch): that work then
runs in every task at once, not one record after another in the broker for all of them. Only
durable events are served and ticks only rise per pubend, so a retried task reads the same events:
retries add no duplicates. Memory stays bounded: the client stops reading its socket
while BUFFER_EVENTS_MAX events wait, and the broker stops reading its log for a blocked
connection.

A lost broker. A read that cannot connect, or whose connection breaks, may be resumed
(`retry_backoff_s`: the streaming read's tasks do) after the last row it handed on, at the same
broker once it answers again: the rows before are not read twice, and the range still ends where
it was planned.

Gaps. If retention released part of the range, the broker says so with a GAP instead of silently
sending less. With failOnDataLoss=true the task fails with DataLossError; with false it logs the
tick range it skipped and reads on after it.

Stopping early. `limit(5).collect()` or `show()` stop reading a task's rows after a few: Spark
closes the task's generator, and every generator and connection inside it is closed here, in
order (batches, the broker's read, the connection), so nothing is left to be collected
after its event loop is gone ("Event loop is closed", "coroutine ... was never awaited"). When
Spark has already dropped the task's output socket, the Python worker that runs the task would
print a BrokenPipeError traceback on its way out (PySpark's daemon re-raises its failed flush); a
worker whose output is gone is of no further use, so it leaves quietly instead (`leave_quietly`),
once its connection to the broker is closed. That is done only inside a Spark task.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any, Protocol

import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no stubs (pyarrow-stubs is not a dependency)
from pyspark.sql.datasource import InputPartition

from tidings.core.errors import ConnectionClosed, GapError
from tidings.core.wire.messages import Records, Span
from tidings.spark.arrow import RecordsError, records_to_batch, span_to_batch
from tidings.spark.overlay import Connect, check_pubend
from tidings.spark.planning import DataLossError, ReadError

logger = logging.getLogger("tidings.spark")

OUTPUT_LOST = (BrokenPipeError, ConnectionResetError)  # the worker's socket to Spark is gone
TRANSIENT = (ConnectionClosed, OSError, TimeoutError)  # a broker lost or restarting: worth another attempt


class ReadSettings(Protocol):
    """What a task's read needs of the options (batch or streaming)."""

    @property
    def pattern(self) -> str: ...

    @property
    def filter(self) -> str | None: ...

    @property
    def fail_on_data_loss(self) -> bool: ...


class TickRangePartition(InputPartition):
    """The ticks `(after, end]` of `pubend`, read from the broker at `address`; an empty range
    (end <= after) reads nothing."""

    def __init__(self, index: int, pubend: str, address: str, after: int, end: int) -> None:
        super().__init__((pubend, after, end))
        self.index = index
        self.pubend = pubend
        self.address = address
        self.after = after
        self.end = end


class Progress:
    """How far a read has gone: every event of its range up to `tick` was handed on (or did not
    match), so a read resumed after it neither loses nor repeats a row."""

    def __init__(self, tick: int) -> None:
        self.tick = tick


def read_batches(client: Any, opts: ReadSettings, pubend: str, after: int, end: int, schema: pa.Schema,
                 pattern: str | None = None, progress: Progress | None = None) -> Generator[pa.RecordBatch, None, None]:
    """The events of `pubend` in `(after, end]` matching the read's pattern (or `pattern`) and
    filter, in tick order, as record batches of `schema`: one bulk read (READ) at the broker
    `client` is connected to, each RECORDS frame decoded straight into one batch.

    A gap either fails the read (DataLossError) or, with failOnDataLoss=false, is logged and read
    past. The broker is a peer: records outside the range, out of order, of another pubend or
    malformed fail the read rather than risk a wrong row. Closing this generator closes the
    broker's read. `progress` follows the position after each batch handed on.
    """
    pattern = opts.pattern if pattern is None else pattern
    position = after
    progress = progress or Progress(after)
    skipped: list[tuple[int, int]] = []
    while position < end:
        items = client.read_records(pattern, filter=opts.filter, after=position, end=end, spans=True)
        try:
            for item in items:
                batch, position = batch_of(item, schema, pubend, pattern, position, end)
                if batch is not None:
                    yield batch
                progress.tick = position
        except GapError as gap:
            if opts.fail_on_data_loss:
                raise DataLossError(pattern, gap.after_tick, gap.through_tick) from None
            if gap.through_tick <= position:
                raise ReadError(
                    f"the broker reported a gap ({gap.after_tick}, {gap.through_tick}] "
                    f"behind the read position {position}"
                ) from None
            lost = (max(gap.after_tick, position), min(gap.through_tick, end))  # the part in this range
            logger.warning(
                "tidings read of %r: skipped ticks (%d, %d], released by retention before they were "
                "read (failOnDataLoss=false)", pattern, *lost,
            )
            skipped.append(lost)
            position = progress.tick = lost[1]
            continue
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()
        break
    if skipped:
        logger.warning(
            "tidings read of %r, range (%d, %d]: skipped %d gap(s), %d ticks in all: %s",
            pattern, after, end, len(skipped), sum(b - a for a, b in skipped),
            ", ".join(f"({a}, {b}]" for a, b in skipped),
        )


def batch_of(item: Any, schema: pa.Schema, pubend: str, pattern: str, position: int, end: int
             ) -> tuple[pa.RecordBatch | None, int]:
    """A bulk read's item (RECORDS, or SPAN: the log's bytes, ours to check and to pick from) as a
    record batch (None: no row), and the read's position after it. ReadError if it is not right."""
    try:
        if isinstance(item, Records):
            return records_to_batch(item.blob, item.count, schema, pubend, position, end)
        if isinstance(item, Span):
            through = min(item.through, end)
            return span_to_batch(item.blob, schema, pubend, pattern, max(position, item.after), through), through
    except RecordsError as exc:
        raise ReadError(f"the broker sent {exc} while reading ({position}, {end}] of pubend {pubend}") from None
    raise ReadError(f"the broker sent {type(item).__name__} {item!r:.80} to a bulk read")


def read_range(
    opts: Any, connect_to: Connect, address: str, instance: str, pubend: str, after: int, end: int,
    schema: pa.Schema, pattern: str | None = None, leave: Callable[[], None] | None = None,
    retry_backoff_s: Sequence[float] = (), sleep: Callable[[float], None] = time.sleep,
) -> Iterator[pa.RecordBatch]:
    """A task's rows: the events of `pubend` in `(after, end]`, read at `address`, as record
    batches of `schema`. An empty range connects to nothing.

    With `retry_backoff_s`, a read that loses its broker (it cannot connect, or the connection
    breaks) waits that long and goes on after the last row it handed on, once per entry: a broker
    being restarted costs a pause, not the task. Errors in what the broker says are not retried."""
    if end <= after:
        return
    output_lost = False
    progress = Progress(after)
    try:
        for attempt in range(len(retry_backoff_s) + 1):
            try:
                with connect_to(opts, address, instance) as client:
                    check_pubend(client, pubend, address)
                    batches = read_batches(client, opts, pubend, progress.tick, end, schema, pattern, progress)
                    try:
                        yield from batches
                    except GeneratorExit as stop:
                        output_lost = isinstance(stop.__context__, OUTPUT_LOST)
                        raise
                    finally:
                        batches.close()
                return
            except TRANSIENT as exc:
                if attempt == len(retry_backoff_s):
                    raise
                logger.warning("tidings read of pubend %s at %s: %s; reading on after tick %d in %g s (attempt %d "
                               "of %d)", pubend, address, exc, progress.tick, retry_backoff_s[attempt], attempt + 2,
                               len(retry_backoff_s) + 1)
                sleep(retry_backoff_s[attempt])
    finally:
        if output_lost:  # the connection is closed by now
            (leave or leave_quietly)()


def leave_quietly() -> None:
    """End this Python worker without a word, if it runs a Spark task: Spark dropped its output
    (an early-stopping action), so the worker can do nothing more and would only print a
    BrokenPipeError on its way out. Outside a Spark task, do nothing."""
    from pyspark import TaskContext  # noqa: PLC0415

    if TaskContext.get() is None:
        return
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os._exit(0)
