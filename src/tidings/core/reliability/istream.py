"""The input stream of one (tree, pubend) at one broker, with its downstream consumers.

Theory of operation (Gryphon exactly-once, §2-§3, on a Scribe tree). Every broker on a tree keeps,
per pubend whose knowledge reached it, an `Istream`: what it knows of each tick (a `KnowledgeMap`:
Q unknown, D data, F silence or no longer needed) and a bounded cache of the D ticks' records.
Downstream of it are `Consumer`s: the broker's children in the tree (output streams, keyed by the
child's address) and its local subscriptions (keyed by subscription key). Each consumer has a
`sent_through`: every tick up to it has been sent to that consumer (or is before its start).

Knowledge flows down contiguously. A consumer is sent the ticks (sent_through, horizon] as soon as
the doubt horizon (the end of the known prefix) passes its `sent_through`, as one message of F and D
ticks. A hop with a gap therefore holds later ticks back (in the bounded cache) instead of passing
them on: subscribers could not deliver past the gap anyway in tick order, and the gap is nacked
once, by the first broker that sees it, so nack consolidation is exact. Retransmission to one
consumer is the same operation: a child's NACK lowers its `sent_through` to what it lacks and the
stream re-sends from there (only down the paths that asked: the others are past it already).

Curiosity flows up. Q ticks between the horizon and the highest known tick, and between the lowest
consumer and the floor the stream knows from, are a gap (`gaps`); when and how often the stream
nacks them (GCT, NRT, backoff, Karn) is curiosity.py's: the stream holds its `StreamCuriosity` and
marks there the ticks it had been past and needs again (`recall`: a catchup's or a rewound child's
position below the floor, silence doubted, a record the cache dropped), whose gap is nacked at
once. D ticks whose record the cache dropped are forgotten back to Q when a consumer still needs
them, and nacked like any gap: the cache is an optimisation, never the only copy.

Acks flow up too: the stream acknowledges the smallest tick every consumer has acknowledged
(children) or been sent (local subscriptions), never past its horizon. A consumer sent back (a
catchup, a child's nack) lowers that point; its progress is acknowledged from there (upstream takes
a lower ack as no news; the pubend paces its answer to a nack by it, source.py). Records below every
consumer's ack leave the cache. Beside each ack go the release point and the delivered point
(release.py): the smallest tick released below, and the smallest tick delivered below, from each
child's last ack (a child that has not acked yet holds them at 0), never past the ack point. A
child that left holds both at its last values for `release_hold_ns` (a *ghost*, ghosts.py); F
ticks that are one catchup's silence only are kept apart (sparse.py).

Filtering (interest.py has the protocol): `pieces_for` may be given a child's filter summary; a D
tick whose record it does not match goes to that child as F (a record's channel and attributes are
decoded once, kept beside the cached record). `doubt_after` turns F ticks after a position back
into Q: they may have been silence for a narrower summary than this broker now asks for.

Invariants: `horizon` only moves with the knowledge (it drops only when ticks are forgotten);
every consumer's `sent_through` <= `horizon` unless it started after it; the cache holds at most
`cache_bytes_max` bytes of records, all of D ticks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import cast

from tidings.core.event import TICK_MAX, record_routing_fields
from tidings.core.reliability.curiosity import StreamCuriosity
from tidings.core.reliability.ghosts import Ghosts
from tidings.core.reliability.messages import RECORDS_PER_MESSAGE_MAX as RECORDS_MAX
from tidings.core.reliability.sparse import SparseSilence
from tidings.core.reliability.summary import Summary
from tidings.core.reliability.ticks import Curiosity, Knowledge, KnowledgeMap

KNOWN = frozenset({Knowledge.D, Knowledge.F, Knowledge.L})
SPARSE_RANGES_MAX = 1024  # ranges one catchup's sparsen leaves unknown (each run costs every gap scan)
GAP = frozenset({Knowledge.Q})
BULK_TICKS_MIN = 8  # a run of D this long is taken into a piece at once (shorter: tick by tick is cheaper)


@dataclass(slots=True)
class Consumer:
    """A child (`key` is its address) or a local subscription (`key` is its subscription key)."""

    key: str | int
    start: int  # ticks at or before this are not wanted
    sent_through: int
    acked_through: int
    blocked: bool = False  # a local subscription whose connection cannot take more now
    released_through: int = 0  # a child's: what every durable subscription below it released
    delivered_through: int = 0  # a child's: what every subscriber below it that keeps up has

    @property
    def local(self) -> bool:
        return type(self.key) is int


@dataclass(slots=True)
class Piece:
    """Knowledge of (after, through] for one consumer: D at `ticks` (records alongside), F elsewhere;
    or, when `lost`, L everywhere (the pubend released those ticks: a gap for a subscriber)."""

    after: int
    through: int
    ticks: list[int] = field(default_factory=list)
    records: list[bytes] = field(default_factory=list)
    lost: bool = False


@dataclass(frozen=True, slots=True)
class StreamLimits:
    cache_bytes_max: int
    nack_ranges_max: int  # ranges in one nack
    nack_range_ticks_max: int  # width of one nacked range
    piece_bytes_max: int  # record bytes in one message to a consumer (one larger record goes alone)
    nack_merge_ticks: int = 100_000  # a catchup's wanted ticks this close are fetched as one range


class Istream:
    __slots__ = ("_cache", "_cache_bytes", "_fields", "_known", "acked_sent", "consumers", "curiosity",
                 "delivered_sent", "floor", "ghosts", "horizon", "limits", "origin", "point_sent", "pubend",
                 "released_sent", "sparse", "top", "tree", "upstream", "waiting")

    def __init__(self, tree: str, pubend: str, floor: int, limits: StreamLimits) -> None:
        self.tree = tree
        self.pubend = pubend
        self.limits = limits
        self._known = KnowledgeMap()
        self.curiosity = StreamCuriosity()  # when its gaps are nacked (curiosity.py)
        self.floor = floor  # nothing at or before it is wanted by any consumer
        if floor > 0:
            self._known.assign(0, floor, Knowledge.F)
        self.horizon = floor
        self.top = floor  # the highest tick known
        # insertion order, oldest first: an OrderedDict drops its oldest entry in O(1), where a dict
        # would walk past every slot already deleted from its front (measured: 18-20 us an eviction)
        self._cache: OrderedDict[int, bytes] = OrderedDict()
        self._cache_bytes = 0
        self._fields: dict[int, tuple[str, Mapping[str, object]] | None] = {}  # decoded (channel, attributes)
        self.consumers: dict[str | int, Consumer] = {}
        self.upstream: str | None = None  # where nacks and acks go: the parent, or the pubend's broker
        self.origin = ""  # the pubend's broker (where the root sends nacks and acks)
        self.acked_sent = floor  # the highest ack sent upstream
        self.point_sent = floor  # the ack point the last ack carried (below acked_sent while a consumer catches up)
        self.released_sent = -1  # the release point that ack carried (-1: none sent yet)
        self.delivered_sent = -1  # and the delivered point
        self.ghosts = Ghosts()  # children that left, holding release a moment longer (ghosts.py)
        self.sparse = SparseSilence()  # F ticks that are one consumer's silence (`sparsen`), not the stream's
        # catchups waiting for the PFS -> (nacks wait up to this tick, until this monotonic ns)
        self.waiting: dict[str | int, tuple[int, int]] = {}

    # ---- consumers -----------------------------------------------------------------------------

    def attach(self, key: str | int, position: int, start: int | None = None) -> Consumer:
        """Add (or reposition) a consumer that has everything up to `position`."""
        consumer = self.consumers.get(key)
        if consumer is None:
            first = position if start is None else start
            consumer = self.consumers[key] = Consumer(key, first, position, position)
            self.ghosts.back(key)
        else:
            consumer.sent_through = position
            consumer.acked_through = min(consumer.acked_through, position)
            consumer.start = min(consumer.start, position)
        if position < self.floor:
            self._lower_floor(position)
        self._doubt_sparse(position)
        return consumer

    def detach(self, key: str | int, now: int = 0, hold_ns: int = 0) -> None:
        """Remove a consumer; a child's release point is held `hold_ns` longer (a ghost)."""
        consumer = self.consumers.pop(key, None)
        self.waiting.pop(key, None)
        if consumer is not None and not consumer.local and hold_ns > 0:
            self.ghosts.left(key, consumer.delivered_through, consumer.released_through, now + hold_ns)

    def rewind(self, key: str | int, position: int) -> None:
        """A consumer lacks ticks after `position` (a child's nack): send them again."""
        consumer = self.consumers.get(key)
        if consumer is None or position >= consumer.sent_through:
            return
        consumer.sent_through = position
        consumer.acked_through = min(consumer.acked_through, position)
        consumer.start = min(consumer.start, position)
        if position < self.floor:
            self._lower_floor(position)
        self._doubt_sparse(position)

    def sparsen(self, key: str | int, after: int, through: int, wanted: Sequence[int]) -> int:
        """Consumer `key` (a durable subscription catching up) needs, of (after, through], only the
        ticks `wanted` (its persistent filtering subsystem says which matched it): the other unknown
        ticks there become F, so that only the wanted ones are nacked and nothing else is fetched
        and filtered for it. Wanted ticks closer than `nack_merge_ticks` stay Q as one range (the
        ticks between them are fetched, and filtered on arrival): at most SPARSE_RANGES_MAX ranges,
        after which the rest stays Q. Only below every other consumer's position, whom those F
        ticks would mislead; one that later asks for ticks below `sparse.through` (attach, rewind)
        doubts them again. Returns how many ticks became F."""
        through = min([through, *(c.sent_through for k, c in self.consumers.items() if k != key)])
        ranges: list[tuple[int, int]] = []
        for tick in wanted:
            if not after < tick <= through:
                continue
            if ranges and tick - ranges[-1][1] <= self.limits.nack_merge_ticks:
                ranges[-1] = (ranges[-1][0], tick)
            elif len(ranges) == SPARSE_RANGES_MAX:
                through = tick - 1
                break
            else:
                ranges.append((tick - 1, tick))
        if through <= after:
            return 0
        made = self._known.sparsen(after, through, ranges)
        self.sparse.mark(made)
        self._advance_horizon()
        return sum(hi - lo for lo, hi in made)

    def lapse_waits(self, now: int) -> None:
        """Catchups that waited for the PFS past their time nack like any other (a read lost)."""
        if self.waiting:
            self.waiting = {key: wait for key, wait in self.waiting.items() if wait[1] > now}

    def _doubt_sparse(self, position: int, through: int = TICK_MAX) -> None:
        """A consumer wants the ticks of (position, through]: the F ticks there that were only
        another consumer's silence (`sparsen`) are Q again, to be fetched."""
        doubted = self.sparse.take(position, through)
        for lo, hi in doubted:
            self._known.assign_where(lo, hi, frozenset({Knowledge.F}), Knowledge.Q)
        if doubted:
            self.curiosity.recall(doubted[-1][1])
            self.horizon = min(self.horizon, doubted[0][0])
            self._advance_horizon()

    def _lower_floor(self, floor: int) -> None:
        """A consumer wants ticks this stream had written off: they become unknown (a gap)."""
        self._known.assign(floor, self.floor, Knowledge.Q)
        self.sparse.unmark(floor, self.floor)
        self.curiosity.recall(self.floor)
        self.floor = floor
        self.horizon = min(self.horizon, floor)

    # ---- knowledge -----------------------------------------------------------------------------

    def accumulate(self, after: int, through: int, ticks: Sequence[int], records: Sequence[bytes]) -> bool:
        """Knowledge of (after, through] arrived; True when the horizon moved. Ticks before the
        floor are dropped (nobody wants them); D ticks keep their record while consumers need it."""
        if through <= self.floor:
            return False
        if after < self.floor:
            keep = [i for i, t in enumerate(ticks) if t > self.floor]
            ticks = [ticks[i] for i in keep]
            records = [records[i] for i in keep]
            after = self.floor
        self._known.accumulate(after, through, ticks)
        self.top = max(self.top, through)
        wanted = self._lowest_wanted()
        cache = self._cache
        if ticks and ticks[0] > wanted and not any(map(cache.__contains__, ticks)):  # first-time news: all in
            cache.update(zip(ticks, records, strict=True))
            self._cache_bytes += sum(map(len, records))
        else:
            for tick, record in zip(ticks, records, strict=True):
                if tick > wanted and tick not in cache:
                    cache[tick] = record
                    self._cache_bytes += len(record)
        return self._advance_horizon()  # the cache is bounded after the consumers were served

    def lose(self, after: int, through: int) -> bool:
        """The pubend released (after, through] before this stream learnt it: unknown ticks there
        become L (known ones keep their value); True when the horizon moved."""
        if through <= self.floor:
            return False
        self._known.mark_lost(max(after, self.floor), through)
        self.top = max(self.top, through)
        return self._advance_horizon()

    def _advance_horizon(self) -> bool:
        horizon = self._known.prefix_end(self.horizon, KNOWN)
        moved = horizon > self.horizon
        self.horizon = horizon
        self.top = max(self.top, horizon)
        return moved

    def pieces_for(self, consumer: Consumer, bound: int = TICK_MAX, summary: Summary | None = None) -> list[Piece]:
        """What `consumer` can be sent now: (sent_through, min(horizon, bound)] in messages of at
        most `piece_bytes_max` of records, stopping before the first D tick whose record was
        dropped (that tick is forgotten, to be nacked); D ticks `summary` does not match as F; each
        run of L ticks after the consumer's start as a piece of its own, `lost`. Advances its
        `sent_through`."""
        upper = min(self.horizon, bound)
        if consumer.blocked or consumer.sent_through >= upper:
            return []
        pieces = self._pieces(consumer.sent_through, upper, consumer.start, summary)
        if pieces:
            consumer.sent_through = pieces[-1].through
        return pieces

    def _pieces(self, after: int, upper: int, start: int, summary: Summary | None) -> list[Piece]:
        """Knowledge of (after, upper] (all known) for a consumer that starts at `start`, as
        `pieces_for` describes; it stops before a D tick whose record was dropped."""
        pieces: list[Piece] = []
        piece = Piece(after, after)
        limit = self.limits.piece_bytes_max
        size = 0
        for lo, hi, value in self._known.runs(after, upper):
            if value is Knowledge.L and hi > start:
                piece.through = max(lo, start)  # what it does not want is silence to it
                if piece.through > piece.after:
                    pieces.append(piece)
                pieces.append(Piece(piece.through, hi, lost=True))
                piece, size = Piece(hi, hi), 0
                continue
            if value is not Knowledge.D:
                piece.through = hi
                continue
            if (summary is None and hi - lo >= BULK_TICKS_MIN and lo >= start
                    and len(piece.ticks) + hi - lo <= RECORDS_MAX):
                # the whole run at once when it fits the piece (as the loop below would take it)
                got = list(map(self._cache.get, range(lo + 1, hi + 1)))
                records = cast(list[bytes], got)  # when None is not in it (else the loop finds the drop)
                run_bytes = 0 if None in got else sum(map(len, records))
                if run_bytes and size + run_bytes <= limit:
                    piece.ticks.extend(range(lo + 1, hi + 1))
                    piece.records.extend(records)
                    size += run_bytes
                    piece.through = hi
                    continue
            for tick in range(lo + 1, hi + 1):
                record = self._cache.get(tick)
                if record is None:
                    self._forget_from(tick)
                    return _closed(pieces, piece)
                if tick > start and (summary is None or self._matches(tick, record, summary)):
                    if piece.ticks and (size + len(record) > limit or len(piece.ticks) >= RECORDS_MAX):
                        pieces.append(piece)
                        piece, size = Piece(piece.through, piece.through), 0
                    piece.ticks.append(tick)
                    piece.records.append(record)
                    size += len(record)
                piece.through = tick
        return _closed(pieces, piece)

    def ready_through(self, consumer: Consumer, bound: int) -> int:
        """How far `consumer` could be sent now, up to `bound`: the horizon, or just before the
        first D tick whose record was dropped (that tick is forgotten, to be nacked); never less
        than what it has already been sent."""
        upper = min(self.horizon, bound)
        for lo, hi, value in self._known.runs(consumer.sent_through, upper) if consumer.sent_through < upper else ():
            if value is Knowledge.D:
                for tick in range(lo + 1, hi + 1):
                    if tick not in self._cache:
                        self._forget_from(tick)
                        return max(consumer.sent_through, tick - 1)
        return max(consumer.sent_through, upper)

    def _matches(self, tick: int, record: bytes, summary: Summary) -> bool:
        """The summary matches the record of `tick`; a record that does not decode goes on (the
        subscriber's broker rejects it), never silenced."""
        if tick in self._fields:
            fields = self._fields[tick]
        else:
            routing = record_routing_fields(record)
            fields = self._fields[tick] = None if routing is None else (routing.channel, routing.attributes)
        return fields is None or summary.matches(*fields)

    def doubt_after(self, position: int, through: int = TICK_MAX) -> None:
        """F ticks after `position` (through `through`) become Q again (and the floor comes down to
        it): they may have been silence for a narrower filter than this broker now wants, so they
        are fetched again."""
        if position < self.floor:
            self._lower_floor(position)
        if position < min(self.top, through):
            self._known.assign_where(position, min(self.top, through), frozenset({Knowledge.F}), Knowledge.Q)
            self.horizon = min(self.horizon, position)
            self._advance_horizon()
            self.curiosity.forget()

    def _forget_from(self, tick: int) -> None:
        """The record of D tick `tick` is gone and a consumer needs it: every D tick from there on
        whose record is gone becomes unknown again, so the gap logic fetches it from upstream."""
        for lo, hi, value in self._known.runs(tick - 1, max(tick, self.horizon)):
            if value is not Knowledge.D:
                continue
            for t in range(lo + 1, hi + 1):
                if t not in self._cache:
                    self._known.assign(t - 1, t, Knowledge.Q)
        self.curiosity.recall(self.horizon)
        self.horizon = min(self.horizon, tick - 1)

    # ---- cache ---------------------------------------------------------------------------------

    def _lowest_wanted(self) -> int:
        """Records at or before this are needed by no consumer."""
        if not self.consumers:
            return self.top
        return min(c.sent_through if c.local else min(c.sent_through, c.acked_through)
                   for c in self.consumers.values())

    def bound_cache(self) -> None:
        """Drop what nobody needs, then, past the byte limit, the oldest records (their ticks stay
        known; a consumer that still needs one gets it through a nack). Called once the consumers
        have been sent what arrived: bounding before would drop a retransmission larger than the
        cache before the consumer that asked for it got it, and it would be asked for again and
        again."""
        cache = self._cache
        if not cache:
            return
        wanted = self._lowest_wanted()
        # every consumer past all of it (a child acked all it was sent): the newest first, O(1), since
        # the cache is in arrival order (mostly tick order; a retransmission may append older ticks)
        if next(reversed(cache)) <= wanted and max(cache) <= wanted:
            cache.clear()
            self._fields.clear()
            self._cache_bytes = 0
            return
        size, size_max, fields = self._cache_bytes, self.limits.cache_bytes_max, self._fields
        while cache:
            oldest, record = cache.popitem(last=False)
            if oldest > wanted and size <= size_max:
                cache[oldest] = record
                cache.move_to_end(oldest, last=False)
                break
            size -= len(record)
            if fields:
                fields.pop(oldest, None)
        self._cache_bytes = size

    @property
    def cache_bytes(self) -> int:
        return self._cache_bytes

    def cached(self) -> list[tuple[int, bytes]]:
        """The records the cache holds, (tick, record), in its order: oldest arrival first."""
        return list(self._cache.items())

    def knowledge(self, tick: int) -> Knowledge:
        """What the stream knows of `tick` (Q, D, S, F or L)."""
        return self._known.get(tick)

    # ---- acks ----------------------------------------------------------------------------------

    def ack_point(self) -> int:
        """The tick through which every consumer has what it needs (children's acks, local
        subscriptions' deliveries), at most the horizon."""
        point = self.horizon
        for c in self.consumers.values():
            point = min(point, c.sent_through if c.local else c.acked_through)
        return point

    def acked(self, key: str, through: int, released: int, delivered: int) -> None:
        consumer = self.consumers.get(key)
        if consumer is None:
            return
        consumer.released_through = min(released, max(consumer.sent_through, self.horizon))
        consumer.delivered_through = min(delivered, max(consumer.sent_through, self.horizon))
        if through > consumer.acked_through:
            consumer.acked_through = min(through, max(consumer.sent_through, self.horizon))
            self.bound_cache()

    def release_points(self, now: int, held: int | None) -> tuple[int, int]:
        """(released, delivered): the ticks through which every durable subscription below released
        the stream (`held`: this broker's own durable subscriptions' smallest release of this
        pubend, None when it hosts none), and through which every subscriber below that keeps up
        has it; at most the ack point, the first at most the second. Ghosts past their time are
        forgotten first."""
        delivered = self.ack_point()
        for c in self.consumers.values():
            if not c.local:
                delivered = min(delivered, c.delivered_through)
        released = delivered if held is None else min(delivered, held)
        for c in self.consumers.values():
            if not c.local:
                released = min(released, c.released_through)
        return self.ghosts.hold(now, released, delivered)

    # ---- gaps and nacks -----------------------------------------------------------------------

    def gaps(self) -> list[tuple[int, int]]:
        """The unknown ranges a consumer is waiting for: between the horizon and the highest known
        tick, chopped to the nack limits (the oldest first). Not those up to where a catchup waits
        for the PFS to say which of them it needs (`waiting`)."""
        start = self.horizon
        if self.waiting:
            start = max(start, *(through for through, _ in self.waiting.values()))
        if self.top <= start:
            return []
        out: list[tuple[int, int]] = []
        width = self.limits.nack_range_ticks_max
        for lo, hi, value in self._known.runs(start, self.top):
            if value is not Knowledge.Q:
                continue
            room = self.limits.nack_ranges_max - len(out)
            out += [(start, min(hi, start + width)) for start in islice(range(lo, hi, width), room)]
            if len(out) >= self.limits.nack_ranges_max:
                return out[: self.limits.nack_ranges_max]
        return out

    def bound_memory(self) -> None:
        """Every consumer is past the ack point: it becomes the floor, and the prefix one F run. A
        consumer that later asks for less (a repaired child) lowers the floor again, and the ticks
        it wants are unknown here, so they are nacked, never answered with this F."""
        point = min(self.ack_point(), self.horizon)
        if point > self.floor:
            self._known.assign(0, point, Knowledge.F)
            self.curiosity.acked_through(point)
            self.floor = point
            self.sparse.release_below(point)

    def status(self) -> dict[str, object]:
        return {"pubend": self.pubend, "horizon": self.horizon, "top": self.top, "floor": self.floor,
                "cache_bytes": self._cache_bytes, "acked": self.acked_sent, "released": self.released_sent,
                "upstream": self.upstream,
                "consumers": len(self.consumers)}


def _closed(pieces: list[Piece], piece: Piece) -> list[Piece]:
    if piece.through > piece.after:
        pieces.append(piece)
    return pieces


__all__ = ["TICK_MAX", "Consumer", "Curiosity", "Istream", "Piece", "StreamLimits"]
