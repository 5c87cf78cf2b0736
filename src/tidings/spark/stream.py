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
  the brokers' leaf sets from `broker` (or another broker when it is down: failover.py) and asking
  each for its status; pulled back by admission control and capped under AvailableNow
  (micro_batch.py).
- **No empty micro-batches.** A tail follows the clock while nothing is published, so an end at
  the tails would make a micro-batch at every trigger. The end moves only when some pubend has a
  matching event after the start: its newest event (`last_event_tick`) says whether it logged
  anything, and if so the driver asks its broker for the first matching one. The tick up to which
  nothing matched is kept (`_clear`): the next trigger asks only after it, and tasks never read
  those ticks. Since the offset is also what the durable subscription releases (one batch late),
  it still moves to the tails every `idleAdvanceIntervalMs` while only other channels' events
  are logged.
- **Outages** (outages.py): a pubend the query knows that the overlay does not report is said once
  (WARN), held back (its broker keeps its events for the query) and reported in the progress
  (`reportLatestOffset`) with every pubend's lag; past `maxPubendOutageMs` it fails the query.
- **Reads** (`partitions`, `read`): each pubend's ticks of the micro-batch are split into ranges;
  a task makes one bounded read of its range at the broker that logged it, which serves only
  durable events in tick order, so a retried task reads the same events again. A task that loses
  its broker reads on after its last row when it is back (READ_RETRY_BACKOFF_S, reading.py).
- **Release** (`commit`): only once Spark has committed a micro-batch does the source acknowledge
  its end to the durable subscription, which lets the pubends release those events. Spark calls
  commit one batch late or not at all (AvailableNow's last batch, a stop): the subscription then
  holds a little more, never less. An acknowledgement only moves forward, so a repeated or older
  commit changes nothing.

Everything on the driver is plain data, because Spark pickles the reader to the executors; the
connections are opened and closed inside each call. Log lines go to the logger `tidings.spark`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from tidings.core.durable.checkpoint import Checkpoint
from tidings.core.errors import DATA_LOSS, UNREACHABLE, GapError, TidingsError
from tidings.spark import coverage
from tidings.spark.arrow import RecordsError, arrow_schema, records_to_batch
from tidings.spark.failover import Entries, NoBrokerError, pin, release, survey_any
from tidings.spark.guard import ImportGuarded
from tidings.spark.micro_batch import Loss, admit, find_losses, latest, logged_after, plan_ranges, skip, to_read
from tidings.spark.offsets import Offset
from tidings.spark.options import StreamOptions
from tidings.spark.outages import Outage, OutageWatch, lag_report, missing_pubends
from tidings.spark.overlay import Connect, Head, Missing, check_pubend, connect
from tidings.spark.planning import ReadError
from tidings.spark.reading import TRANSIENT, TickRangePartition, read_range

logger = logging.getLogger("tidings.spark")

# a task's pauses before it reads on at a broker it lost (about 20 s in all: a restart fits), and the
# driver's before it pins the start when no broker answers
READ_RETRY_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0)
MATCH_ALL = "#"


class StreamDataLossError(ReadError):
    """Retention released ticks the query had not read yet."""

    code = DATA_LOSS

    def __init__(self, pattern: str, losses: list[Loss]) -> None:
        super().__init__(
            f"tidings stream of {pattern!r}: events were released by the broker's retention before the "
            f"query read them ({'; '.join(map(str, losses))}); restart from a later offset, or set "
            '.option("failOnDataLoss", "false") to skip them (counted in the offset\'s "lost")'
        )
        self.losses = losses


class PubendOutageError(ReadError):
    """A pubend was unreachable for longer than maxPubendOutageMs."""

    code = UNREACHABLE

    def __init__(self, pattern: str, outage: Outage, down_ns: int, position: int, bound_ms: int) -> None:
        super().__init__(
            f"tidings stream of {pattern!r}: {outage.describe()} has been unreachable for {down_ns / 1e9:.1f} s, "
            f"longer than maxPubendOutageMs={bound_ms}; its events after tick {position} are held for the query "
            "(nothing is lost): restart the query from its checkpoint once its broker is back, or raise "
            "maxPubendOutageMs"
        )


# ---- the reader --------------------------------------------------------------------------------

class TidingsStreamReader(ImportGuarded, DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: StreamOptions, schema: StructType, connect_to: Connect = connect,
                 clock: Callable[[], int] = time.monotonic_ns, sleep: Callable[[float], None] = time.sleep) -> None:
        self.opts = opts
        self.schema = schema
        self.connect_to = connect_to
        self.clock = clock  # monotonic ns: outages and the idle advance
        self.sleep = sleep
        self._initial: dict[str, Any] | None = None
        self._cap: dict[str, int] | None = None  # AvailableNow: the tails when the query started
        self._heads: dict[str, Head] = {}  # the last discovery
        self._seen: dict[str, Head] = {}  # every pubend this driver has seen, as last seen
        self._unreachable: dict[str, str] = {}  # brokers the last discovery could not reach, and why
        self._floors: dict[str, dict[str, int]] = {}  # end offset (key) -> per pubend, the ticks not to read again
        self._clear: dict[str, int] = {}  # per pubend: no matching event above the query's position up to this
        self._watch = OutageWatch(None if opts.pubend_outage_ms_max is None else opts.pubend_outage_ms_max * 10**6)
        self._silent: set[str] = set()  # unreachable brokers already reported (their pubend unknown)
        self._homes: set[str] = set()  # brokers other than `broker` holding the durable subscription
        self._brokers = Entries(clock=clock)  # the brokers the driver may talk to (failover.py)
        self._advanced_ns: int | None = None  # when the offset last moved (planning's first trigger at first)
        self._report: dict[str, Any] | None = None  # what reportLatestOffset says
        self._missing: dict[str, Missing] = {}  # pubends the directory lists that the last discovery did not reach
        self.unreached: dict[str, coverage.Unread] = {}  # AvailableNow: pubends skipped (failOnDataLoss=false)

    # ---- the start --------------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        if self._initial is None:
            for pause in (*READ_RETRY_BACKOFF_S, None):
                try:
                    offset, home = pin(self.opts, self._wanted_start(), self.connect_to, self._entries())
                    break
                except NoBrokerError:
                    if pause is None:
                        raise
                    self.sleep(pause)
            if home != self.opts.broker:
                self._homes.add(home)
            self._initial = offset.to_json()
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

    def _entries(self) -> Entries:
        self._brokers.learned = {h.address for h in self._seen.values()}
        return self._brokers

    def _discover(self) -> dict[str, Head]:
        unreachable: dict[str, str] = {}

        def note(address: str, exc: BaseException) -> None:
            unreachable.setdefault(address, str(exc))

        found = survey_any(self.opts, self.connect_to, self._entries(), note)
        self._heads, self._missing = found.heads, found.missing
        self._unreachable = unreachable
        self._seen.update(self._heads)
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

    # ---- the end of a micro-batch -----------------------------------------------------------------

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The next micro-batch's end: the tails of the pubends with events to read (held back by
        admission control), the start itself when there is nothing to read (Spark then runs no
        micro-batch), and now and then the tails when only other channels' events were logged
        (idleAdvanceIntervalMs, so that the durable subscription lets them go)."""
        now = self.clock()
        if self._advanced_ns is None:
            self._advanced_ns = now
        begin = Offset.from_json(start)
        heads = self._reachable(now, begin)
        floor = begin.moved(self._clear)
        losses = find_losses(floor, heads)
        if losses:
            if self.opts.fail_on_data_loss:
                raise StreamDataLossError(self.opts.pattern, losses)
            begin = skip(begin, losses)
            logger.warning("tidings stream of %r: skipped %s (failOnDataLoss=false); %d ranges, %d ticks "
                           "skipped since the query started", self.opts.pattern, "; ".join(map(str, losses)),
                           begin.lost_ranges, begin.lost_ticks)
        if self._cap is not None:
            self._check_reach(begin)
        tails = latest(begin, heads, self._cap)
        events_max = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        ticks, complete, behind = self._unread(begin, tails, heads, events_max)
        end = latest(begin, {p: h for p, h in heads.items() if p in complete}, self._cap)
        if any(ticks.values()):
            if events_max is not None:
                end = admit(begin, end, ticks, complete, events_max)
                behind = {**behind, **{p: sum(t > end.position(p) for t in ts) if complete[p] else None
                                       for p, ts in ticks.items()}}
        elif not losses and not (self._cap is None and now - self._advanced_ns >= self._idle_ns
                                 and logged_after(begin, heads)):
            end = begin  # nothing to read: no micro-batch
        if end != Offset.from_json(start):
            self._advanced_ns = now
        self._floors = {_key(end): {p: max(self._clear.get(p, 0), begin.position(p)) for p in heads}}
        self._report = lag_report(end, self._seen, heads, self._watch.outages, self._clear, behind, now)
        return end.to_json()

    @property
    def _idle_ns(self) -> int:
        return self.opts.idle_advance_interval_ms * 10**6

    def _reachable(self, now: int, begin: Offset) -> dict[str, Head]:
        """The pubends the overlay reports now; outages of the others said once, and failed past
        maxPubendOutageMs."""
        try:
            heads = self._discover()
        except NoBrokerError as exc:
            if "" not in self._silent:
                logger.warning("%s; the query waits for one", exc)
                self._silent.add("")
            heads, self._heads, self._unreachable = {}, {}, {}
        else:
            self._silent.discard("")
        known = (dict.fromkeys(begin.positions) | {p: m.address for p, m in self._missing.items()}
                 | {p: h.address for p, h in self._seen.items()})
        started, ended = self._watch.observe(now, missing_pubends(known, heads))
        for outage in started:
            logger.warning("tidings stream of %r: %s is not reachable: its events after tick %d are held back (its "
                           "broker keeps them for the query) and read when it is back; the other pubends' events "
                           "go on", self.opts.pattern, outage.describe(), begin.position(outage.pubend))
        for outage, down_ns in ended:
            logger.warning("tidings stream of %r: %s is reachable again after %.1f s: its events are read on from "
                           "tick %d", self.opts.pattern, outage.describe(), down_ns / 1e9,
                           begin.position(outage.pubend))
        addresses = {o.address for o in self._watch.outages.values()} | {h.address for h in heads.values()}
        for address in sorted(set(self._unreachable) - addresses - self._silent):
            logger.warning("tidings stream of %r: broker %s of the overlay is not reachable (%s): the events its "
                           "pubend logged are read when it is back", self.opts.pattern, address,
                           self._unreachable[address])
        self._silent = (self._silent & (set(self._unreachable) | {""})) | (set(self._unreachable) - addresses)
        overdue = self._watch.overdue(now)
        if overdue is not None:
            assert self.opts.pubend_outage_ms_max is not None
            raise PubendOutageError(self.opts.pattern, overdue, now - overdue.since_ns,
                                    begin.position(overdue.pubend), self.opts.pubend_outage_ms_max)
        return heads

    def _unread(self, begin: Offset, tails: Offset, heads: Mapping[str, Head], events_max: int | None
                ) -> tuple[dict[str, list[int]], dict[str, bool], dict[str, int | None]]:
        """Per pubend with events after the start (up to `tails`): the first of their ticks (a tick
        of an event for one surely there but not asked), whether they are all, and how many events
        are behind; pubends with none are complete and 0 behind, and remembered as clear up to their
        tails. A pubend whose broker was lost meanwhile is left out (held back)."""
        match_all = self.opts.pattern == MATCH_ALL and self.opts.filter is None
        sure, ask = to_read(begin, tails, heads, self._clear, match_all)
        if events_max is not None:
            sure, ask = [], sorted({*sure, *ask})
        ticks: dict[str, list[int]] = {p: [tails.position(p)] for p in sure}
        complete = dict.fromkeys(heads, True)
        behind: dict[str, int | None] = dict.fromkeys(sure)
        for pubend in ask:
            after = max(begin.position(pubend), self._clear.get(pubend, 0))
            try:
                found, done = self._first_ticks(pubend, after, tails.position(pubend), events_max or 1)
            except TRANSIENT as exc:
                logger.info("tidings stream of %r: pubend %s lost while planning (%s): held back", self.opts.pattern,
                            pubend, exc)
                del complete[pubend]
                continue
            ticks[pubend], complete[pubend] = found, done
            behind[pubend] = len(found) if done else None
            if done and not found:
                self._clear[pubend] = tails.position(pubend)
        for pubend in heads:
            if pubend not in ticks and pubend in complete:
                self._clear[pubend] = max(self._clear.get(pubend, 0), tails.position(pubend))
                behind[pubend] = 0
        return ticks, complete, behind

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """For the query's progress (`latestOffset`): every pubend at its tail, and per pubend its
        broker, whether it is reachable, and what the query has not read yet (outages.lag_report)."""
        return self._report

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

    # ---- reading ----------------------------------------------------------------------------------

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin, stop = Offset.from_json(start), Offset.from_json(end)
        moved = [p for p in stop.positions if stop.position(p) > begin.position(p)]
        for pause in (*READ_RETRY_BACKOFF_S, None):  # a restarted driver replaying a batch: where are they?
            if all(p in self._heads for p in moved):
                break
            try:
                self._discover()
            except NoBrokerError:
                if pause is None:
                    raise
            if pause is not None and any(p not in self._heads for p in moved):
                self.sleep(pause)  # a pubend of the batch is unreachable: it must be read, so wait a little
        addresses = {p: h.address for p, h in self._heads.items()}
        ranges = plan_ranges(begin, stop, addresses, self.opts.partitions, self._floors.get(_key(stop)),
                             {p: h.marks for p, h in self._heads.items()})
        return [TickRangePartition(i, r.pubend, r.address, r.after, r.end) for i, r in enumerate(ranges)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, TickRangePartition), partition
        yield from read_range(self.opts, self.connect_to, partition.address, f"stream-{partition.index}",
                              partition.pubend, partition.after, partition.end, arrow_schema(self.schema),
                              retry_backoff_s=READ_RETRY_BACKOFF_S, sleep=self.sleep)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed everything up to `end`: the durable subscription may let it go. A broker
        that cannot be reached now is told at the next commit (a release is a maximum, not a step)."""
        try:
            release(self.opts, Offset.from_json(end), self.connect_to, self._entries(), self._homes)
        except (OSError, TimeoutError, TidingsError) as exc:
            logger.warning("tidings stream of %r: could not acknowledge offset %s to durable subscription %r "
                           "(%s); the next commit will", self.opts.pattern, end, self.opts.durable_name, exc)

    def stop(self) -> None:
        """Nothing to free: no connection outlives a call (and Spark may never call this)."""


def _key(offset: Offset) -> str:
    return repr(sorted(offset.to_json().items()))
