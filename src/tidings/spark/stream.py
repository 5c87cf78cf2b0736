"""The PySpark streaming source: `spark.readStream.format("tidings")`.

Theory of operation. The query's offset is a checkpoint token's vector {pubend: tick} (offsets.py),
so Spark's offset log holds, after each micro-batch, exactly the position a durable subscriber
would hold, and a restarted query goes on from it through any broker. The driver plans, the
executors read:

- **Start, pinned.** `initialOffset()` is asked more than once (again when batch 0 is replayed
  after a crash) and Spark does not store its answer, so "latest" must not move between calls. The
  query's durable subscription, named by the `durableName` option and held by the `broker`, pins
  it: the first call creates the subscription at the start it computes, every later call (in this
  process or a restarted driver) reads the subscription's position back. Until the first commit
  that position is the start itself.
- **Ends** (`latestOffset`): each pubend's durable tail over the whole overlay, found by walking
  the brokers' leaf sets from `broker` and asking each for its status; pulled back by admission
  control and capped under AvailableNow (micro_batch.py).
- **Reads** (`partitions`, `read`): each pubend's ticks of the micro-batch are split into ranges;
  a task makes one bounded read of its range at the broker that logged it, which serves only
  durable events in tick order, so a retried task reads the same events again.
- **Release** (`commit`): only once Spark has committed a micro-batch does the source acknowledge
  its end to the durable subscription, which lets the pubends release those events. Spark calls
  commit one batch late or not at all (AvailableNow's last batch, a stop): the subscription then
  holds a little more, never less. An acknowledgement only moves forward, so a repeated or older
  commit changes nothing.

Everything on the driver is plain data, because Spark pickles the reader to the executors; the
connections are opened and closed inside each call. Log lines go to the logger `tidings.spark`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from tidings.core.checkpoint import Checkpoint
from tidings.core.errors import GapError, TidingsError
from tidings.spark import coverage
from tidings.spark.arrow import RecordsError, arrow_schema, records_to_batch
from tidings.spark.guard import ImportGuarded
from tidings.spark.micro_batch import Loss, admit, find_losses, latest, plan_ranges, skip
from tidings.spark.offsets import Offset
from tidings.spark.options import StreamOptions
from tidings.spark.overlay import Connect, Head, Missing, check_pubend, connect, log_missing, survey
from tidings.spark.planning import ReadError
from tidings.spark.reading import TickRangePartition, read_range

logger = logging.getLogger("tidings.spark")

REGISTRATION_BUSY_S_MAX = 10.0  # the broker may still hold our previous connection's use of the name
REGISTRATION_RETRY_S = 0.1


class StreamDataLossError(ReadError):
    """Retention released ticks the query had not read yet."""

    code = "data-loss"

    def __init__(self, pattern: str, losses: list[Loss]) -> None:
        super().__init__(
            f"tidings stream of {pattern!r}: events were released by the broker's retention before the "
            f"query read them ({'; '.join(map(str, losses))}); restart from a later offset, or set "
            '.option("failOnDataLoss", "false") to skip them (counted in the offset\'s "lost")'
        )
        self.losses = losses


# ---- the durable subscription that pins the start and takes the releases ----------------------

@contextlib.contextmanager
def registration(opts: StreamOptions, create_at: int, connect_to: Connect = connect) -> Iterator[tuple[Any, Any]]:
    """(client, subscription) of the query's named durable subscription at `opts.broker`, created
    after tick `create_at` if it does not exist; closed (away, still holding) on exit."""
    deadline = time.monotonic() + REGISTRATION_BUSY_S_MAX
    with connect_to(opts, opts.broker, "registration") as client:
        while True:
            try:
                sub = client.subscribe(opts.pattern, filter=opts.filter, start=create_at, durable=opts.durable_name)
                break
            except TidingsError as exc:  # "in use by another connection": our last one, closing
                if "in use" not in str(exc) or time.monotonic() > deadline:
                    raise
            time.sleep(REGISTRATION_RETRY_S)
        try:
            yield client, sub
        finally:
            sub.close()


def pin(opts: StreamOptions, want: Offset, connect_to: Connect = connect) -> Offset:
    """The query's start: `want` when this call creates its durable subscription, else the
    subscription's position (the start pinned by an earlier call, or the last commit)."""
    with registration(opts, want.default, connect_to) as (client, sub):
        held = Checkpoint.decode(sub.token)
        if held.default == want.default and held.positions == {client.pubend: want.default}:
            sub.ack(want.token())  # new: it holds from `want` on
            return want
        return Offset.from_checkpoint(held)


def release(opts: StreamOptions, end: Offset, connect_to: Connect = connect) -> None:
    """Acknowledge `end` to the query's durable subscription (only ever forward)."""
    with registration(opts, end.default, connect_to) as (_client, sub):
        sub.ack(end.token())


# ---- the reader --------------------------------------------------------------------------------

class TidingsStreamReader(ImportGuarded, DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: StreamOptions, schema: StructType, connect_to: Connect = connect) -> None:
        self.opts = opts
        self.schema = schema
        self.connect_to = connect_to
        self._initial: dict[str, Any] | None = None
        self._cap: dict[str, int] | None = None  # AvailableNow: the tails when the query started
        self._heads: dict[str, Head] = {}  # the last discovery
        self._missing: dict[str, Missing] = {}  # pubends the directory lists that it did not reach
        self.unreached: dict[str, coverage.Unread] = {}  # AvailableNow: pubends skipped (failOnDataLoss=false)
        self._skipped: dict[str, dict[str, int]] = {}  # end offset (JSON) -> ticks skipped below it

    def initialOffset(self) -> dict[str, Any]:
        if self._initial is None:
            self._initial = pin(self.opts, self._wanted_start(), self.connect_to).to_json()
        return self._initial

    def _wanted_start(self) -> Offset:
        starting = self.opts.starting
        if isinstance(starting, int):
            return Offset.make(starting)
        if starting.startswith("tk"):
            return Offset.from_checkpoint(Checkpoint.decode(starting))
        heads = self._discover()
        if starting == "earliest":
            return Offset.make(0, {p: h.released_through for p, h in heads.items()})
        tails = {p: h.last_tick for p, h in heads.items()}
        return Offset.make(min(tails.values(), default=0), tails)

    def _discover(self) -> dict[str, Head]:
        found = survey(self.opts, self.connect_to)
        self._heads, self._missing = found.heads, found.missing
        if self._cap is None:
            log_missing(found)
        return self._heads

    def _check_reach(self, begin: Offset) -> None:
        """AvailableNow: a pubend that cannot be read and holds events after the query's position
        fails the run naming it, or (failOnDataLoss=false) is skipped, warned of once and counted
        (coverage.py); it stays at its position, for a later run."""
        found = coverage.unread_all(self._missing, {p: begin.position(p) for p in self._missing}, None)
        new = [u for u in found if u.pubend not in self.unreached]
        for u in coverage.check(f"stream of {self.opts.pattern!r} (AvailableNow)", new, self.opts.fail_on_data_loss):
            self.unreached[u.pubend] = u

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.opts.events_per_trigger_max
        return super().getDefaultReadLimit() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        self._cap = {p: h.last_tick for p, h in self._discover().items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = Offset.from_json(start)
        heads = self._discover()
        losses = find_losses(begin, heads)
        if losses:
            if self.opts.fail_on_data_loss:
                raise StreamDataLossError(self.opts.pattern, losses)
            begin = skip(begin, losses)
            logger.warning("tidings stream of %r: skipped %s (failOnDataLoss=false); %d ranges, %d ticks "
                           "skipped since the query started", self.opts.pattern, "; ".join(map(str, losses)),
                           begin.lost_ranges, begin.lost_ticks)
        if self._cap is not None:
            self._check_reach(begin)
        end = latest(begin, heads, self._cap)
        if isinstance(limit, ReadMaxRows) and end != begin:
            end = self._admit(begin, end, limit.max_rows)
        if losses:
            self._skipped = {_key(end): {loss.pubend: loss.through for loss in losses}}
        return end.to_json()

    def _admit(self, begin: Offset, end: Offset, events_max: int) -> Offset:
        """`end` pulled back to at most `events_max` events: the first matching ticks of each pubend
        that moved, read from its broker (micro_batch.admit)."""
        ticks: dict[str, list[int]] = {}
        complete: dict[str, bool] = {}
        for pubend in sorted(end.positions):
            after, stop = begin.position(pubend), end.position(pubend)
            if stop <= after:
                continue
            ticks[pubend], complete[pubend] = self._first_ticks(pubend, after, stop, events_max)
        return admit(begin, end, ticks, complete, events_max)

    def _first_ticks(self, pubend: str, after: int, end: int, count: int) -> tuple[list[int], bool]:
        """The first `count` matching ticks of `pubend` in (after, end], and whether that is all."""
        found: list[int] = []
        schema = arrow_schema(self.schema)
        with self.connect_to(self.opts, self._heads[pubend].address, "admission") as client:
            check_pubend(client, pubend, self._heads[pubend].address)
            items = client.read_records(self.opts.pattern, filter=self.opts.filter, after=after, end=end)
            try:
                for records in items:  # the bulk read of a task (reading.py), its ticks only
                    batch, _ = records_to_batch(records.blob, records.count, schema, pubend,
                                                found[-1] if found else after, end)
                    found += batch.column("tick").to_pylist()
                    if len(found) >= count:
                        return found[:count], False
            except RecordsError as exc:
                raise ReadError(f"the broker sent {exc} while counting ({after}, {end}] of pubend {pubend}") from None
            except GapError:  # released since the status: the next trigger counts it
                return found, False
            finally:
                items.close()
        return found, True

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin, stop = Offset.from_json(start), Offset.from_json(end)
        moved = [p for p in stop.positions if stop.position(p) > begin.position(p)]
        if any(p not in self._heads for p in moved):  # a restarted driver replaying a batch
            self._discover()
        addresses = {p: h.address for p, h in self._heads.items()}
        ranges = plan_ranges(begin, stop, addresses, self.opts.partitions, self._skipped.get(_key(stop)),
                             {p: h.marks for p, h in self._heads.items()})
        return [TickRangePartition(i, r.pubend, r.address, r.after, r.end) for i, r in enumerate(ranges)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, TickRangePartition), partition
        yield from read_range(self.opts, self.connect_to, partition.address, f"stream-{partition.index}",
                              partition.pubend, partition.after, partition.end, arrow_schema(self.schema))

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed everything up to `end`: the durable subscription may let it go. A broker
        that cannot be reached now is told at the next commit (a release is a maximum, not a step)."""
        try:
            release(self.opts, Offset.from_json(end), self.connect_to)
        except (OSError, TimeoutError, TidingsError) as exc:
            logger.warning("tidings stream of %r: could not acknowledge offset %s to durable subscription %r "
                           "at %s (%s); the next commit will", self.opts.pattern, end, self.opts.durable_name,
                           self.opts.broker, exc)

    def stop(self) -> None:
        """Nothing to free: no connection outlives a call (and Spark may never call this)."""


def _key(offset: Offset) -> str:
    return repr(sorted(offset.to_json().items()))
