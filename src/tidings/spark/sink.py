"""The PySpark sink: `df.write.format("tidings")` and `df.writeStream.format("tidings")`.

Theory of operation. Each Spark task publishes the rows of its partition through one broker with
idempotent publishes: every row carries a producer id and a sequence that every re-run of the
same write gives it again (producer.py), so the broker logs it at most once and answers a repeat
with the original (pubend, tick). Re-runs are what Spark does to be fault tolerant: a task retry,
a micro-batch replayed after an abort or a driver restart, a batch job run again with the same
`writeId`. Each then publishes nothing twice, as long as the repeat reaches the broker within its
dedup window (10 minutes by default).

- **One broker per writer.** The broker's window is its own; a task connects to the `broker`
  option and stays there (`follow_advice=False`): route advice would move it to a broker that
  never saw the first attempt.
- **Tasks** convert their rows to events (rows.py) and publish them `rowsPerPublish` at a time,
  each `publish_many` returning once the events are durable. A row that cannot be an event, or
  whose event the broker refuses, fails the task with the broker's message and the row's index;
  rows are never skipped. The commit message counts rows and duplicates.
- **Commit and abort** publish nothing: the events are in the log once their task's publishes
  returned. `commit` logs a summary; `abort` cannot take back what tasks published, so it logs
  that a re-run (Spark's replay of the micro-batch, or the same batch write with the same
  `writeId`) completes the write without publishing those rows again.

Everything the writer holds is plain data, since Spark pickles it to the executors. Log lines go
to the logger `tidings.spark`.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from tidings.core.errors import BrokerError, TidingsError
from tidings.spark.guard import ImportGuarded
from tidings.spark.options import WriteOptions
from tidings.spark.producer import keyed_producer_id, producer_id, row_seq
from tidings.spark.rows import SinkColumns, row_event, row_key, row_problem

logger = logging.getLogger("tidings.spark")

SERVICE = "spark"
QUERY_ID_PROPERTY = "sql.streaming.queryId"  # Spark's local properties of a micro-batch's tasks
BATCH_ID_PROPERTY = "streaming.sql.batchId"


class SinkError(TidingsError):
    """A row the sink could not publish: the task fails with this message."""

    code = "sink"


class Publisher(Protocol):
    """What the sink needs of `tidings.sync`'s blocking client."""

    def publish_many(self, items: Iterable[tuple[Any, ...]], *, producer: str | None = None) -> list[Any]: ...


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task published: its partition, rows, and how many of them the broker had logged
    before (a re-run's rows); `pubend` is the log they are in (None: no rows)."""

    partition: int
    rows: int
    duplicates: int
    pubend: str | None


@dataclass(frozen=True, slots=True)
class Task:
    """Who writes: the write's id, the Spark partition and micro-batch (0 for a batch write), and
    which attempt of the task this is."""

    write_id: str
    partition: int
    batch: int = 0
    attempt: int = 0


def connect(opts: WriteOptions, instance: str) -> Any:
    """A blocking connection to the options' broker that never moves to another broker."""
    from tidings import sync  # noqa: PLC0415  (imported late: executors import this module)

    tls: Any = False
    if opts.tls_ca is not None:
        from tidings.aio.tls import client_context  # noqa: PLC0415

        tls = client_context(Path(opts.tls_ca))
    return sync.connect(opts.broker, service=SERVICE, instance=instance, credential=opts.credential, tls=tls,
                        follow_advice=False)


def write_rows(rows: Iterable[Sequence[Any]], columns: SinkColumns, task: Task, opts: WriteOptions,
               open_client: Callable[[], Any]) -> SinkCommit:
    """Publish `rows` (values in the DataFrame's column order) idempotently, `opts.rows_per_publish`
    at a time; the client is opened at the first row and closed at the end. SinkError names the
    first row that could not be published."""
    keyed = columns.key is not None
    producer = keyed_producer_id(task.write_id) if keyed else producer_id(task.write_id, task.partition)
    commit = SinkCommit(task.partition, 0, 0, None)
    chunk: list[tuple[Any, ...]] = []
    with contextlib.ExitStack() as stack:
        client: Any = None
        for index, values in enumerate(rows):
            try:
                event = row_event(values[columns.channel], values[columns.payload],
                                  None if columns.attributes is None else values[columns.attributes])
                seq = row_key(values[columns.key]) if columns.key is not None else row_seq(task.batch, index)
            except ValueError as exc:
                raise SinkError(f"tidings sink: row {index} of partition {task.partition}: {exc}") from None
            chunk.append((*event, seq))
            if len(chunk) >= opts.rows_per_publish:
                client = client or stack.enter_context(open_client())
                _publish(client, chunk, producer, index + 1 - len(chunk), task, commit)
                chunk = []
                _fail_if_asked(opts, task, commit)
        if chunk:
            client = client or stack.enter_context(open_client())
            _publish(client, chunk, producer, commit.rows, task, commit)
            _fail_if_asked(opts, task, commit)
    return commit


def _fail_if_asked(opts: WriteOptions, task: Task, commit: SinkCommit) -> None:
    """testOnlyFailFirstAttempt: the first attempt of a task dies once it has published."""
    if opts.fail_first_attempt and task.attempt == 0:
        raise SinkError(f"tidings sink: testOnlyFailFirstAttempt: partition {task.partition} fails after "
                        f"publishing {commit.rows} rows")


def _publish(client: Publisher, chunk: list[tuple[Any, ...]], producer: str, first: int, task: Task,
             commit: SinkCommit) -> None:
    """One publish_many of `chunk`, whose first row is row `first` of the partition."""
    where = f"partition {task.partition}"
    try:
        results = client.publish_many(chunk, producer=producer)
    except BrokerError as exc:  # the broker refused an event: the others of the chunk are logged
        answers = getattr(exc, "results", None) or []
        bad = next((k for k, r in enumerate(answers) if isinstance(r, BrokerError)), None)
        row = f"row {first + bad}" if bad is not None else f"rows {first} to {first + len(chunk) - 1}"
        raise SinkError(f"tidings sink: {row} of {where}: the broker refused its event: {exc}") from None
    except ValueError as exc:  # refused by the client before anything was sent
        payload_max = getattr(client, "event_bytes_max", None)
        for k, (channel, payload, attributes, _seq) in enumerate(chunk):
            problem = row_problem(channel, payload, attributes, payload_max)
            if problem is not None:
                raise SinkError(f"tidings sink: row {first + k} of {where}: {problem}") from None
        raise SinkError(f"tidings sink: rows {first} to {first + len(chunk) - 1} of {where}: {exc}") from None
    commit.rows += len(results)
    commit.duplicates += sum(1 for r in results if r.duplicate)
    commit.pubend = commit.pubend or (results[0].pubend if results else None)


def arrow_rows(batches: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """The rows of Arrow record batches as tuples of Python values (a map as (key, value) pairs)."""
    for batch in batches:
        yield from zip(*(column.to_pylist() for column in batch.columns), strict=True)


def _task_context() -> Any:
    from pyspark import TaskContext  # noqa: PLC0415

    context = TaskContext.get()
    if context is None:
        raise SinkError("tidings sink: write() runs in a Spark task, and there is none")
    return context


def _summary(messages: Sequence[WriterCommitMessage | None]) -> tuple[int, int, int]:
    """(tasks that reported, rows, duplicates) of the commit messages."""
    done = [m for m in messages if isinstance(m, SinkCommit)]
    return len(done), sum(m.rows for m in done), sum(m.duplicates for m in done)


class TidingsWriter(ImportGuarded, DataSourceArrowWriter):
    """`df.write.format("tidings")`: one job, named by `writeId` or by an id drawn here, on the
    driver, once per job (its tasks and their retries share it)."""

    def __init__(self, opts: WriteOptions, columns: SinkColumns) -> None:
        self.opts = opts
        self.columns = columns
        self.write_id = opts.write_id or f"job-{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        context = _task_context()
        task = Task(self.write_id, context.partitionId(), 0, context.attemptNumber())
        return write_rows(arrow_rows(iterator), self.columns, task, self.opts,
                          lambda: connect(self.opts, f"sink-{task.partition}"))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        tasks, rows, duplicates = _summary(messages)
        logger.info("tidings sink: write %s published %d rows from %d tasks to %s (%d had been published before)",
                    self.write_id, rows, tasks, self.opts.broker, duplicates)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        tasks, rows, _ = _summary(messages)
        logger.warning("tidings sink: write %s failed; %d tasks had published their %d rows, which stay published "
                       "(an event log takes nothing back). Run the same write again with .option(\"writeId\", %r) "
                       "within the broker's dedup window to publish the rest without publishing any row twice",
                       self.write_id, tasks, rows, self.write_id)


class TidingsStreamWriter(ImportGuarded, DataSourceStreamArrowWriter):
    """`df.writeStream.format("tidings")`: every micro-batch's rows named by the query's id (kept in
    its checkpoint) and the micro-batch id, both read from the task's Spark local properties."""

    def __init__(self, opts: WriteOptions, columns: SinkColumns) -> None:
        self.opts = opts
        self.columns = columns

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        context = _task_context()
        query, batch = context.getLocalProperty(QUERY_ID_PROPERTY), context.getLocalProperty(BATCH_ID_PROPERTY)
        if not query or batch is None or not batch.isdigit():
            raise SinkError(f"tidings sink: the task does not carry its streaming query's id and micro-batch id "
                            f"(local properties {QUERY_ID_PROPERTY}={query!r}, {BATCH_ID_PROPERTY}={batch!r}); "
                            "without them its rows cannot be named for exactly-once publishing")
        task = Task(query, context.partitionId(), int(batch), context.attemptNumber())
        return write_rows(arrow_rows(iterator), self.columns, task, self.opts,
                          lambda: connect(self.opts, f"sink-{task.batch}-{task.partition}"))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        tasks, rows, duplicates = _summary(messages)
        logger.info("tidings sink: micro-batch %d published %d rows from %d tasks to %s (%d had been published "
                    "before)", batchId, rows, tasks, self.opts.broker, duplicates)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        tasks, rows, _ = _summary(messages)
        logger.warning("tidings sink: micro-batch %d aborted; %d tasks had published their %d rows, which stay "
                       "published. When the query runs again it replays the micro-batch, and the broker "
                       "recognises those rows instead of publishing them twice", batchId, tasks, rows)
