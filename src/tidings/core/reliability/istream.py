"""The input stream of one (tree, pubend) at one broker, with its downstream consumers.

Theory of operation (Gryphon exactly-once, §2-§3, on a Scribe tree). Every broker on a tree keeps,
per pubend whose knowledge reached it, an `Istream`: what it knows of each tick (a `KnowledgeMap`:
Q unknown, D data, F silence or no longer needed) and a bounded cache of the D ticks' records
(record_cache.py). Downstream of it are `Consumer`s (consumers.py): the broker's children in the
tree and its local subscriptions, each with a `sent_through`: every tick up to it has been sent to
that consumer (or is before its start).

Knowledge flows down contiguously. A consumer is sent the ticks (sent_through, horizon] as soon as
the doubt horizon (the end of the known prefix) passes its `sent_through`, as messages of F and D
ticks (`pieces_for`; pieces.py cuts them). A hop with a gap therefore holds later ticks back (in
the bounded cache) instead of passing them on: subscribers could not deliver past the gap anyway in
tick order, and the gap is nacked once, by the first broker that sees it, so nack consolidation is
exact. Retransmission to one consumer is the same operation: a child's NACK lowers its
`sent_through` to what it lacks and the stream re-sends from there (only down the paths that asked:
the others are past it already).

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

Knowledge passes through as it came: a message that moves the horizon from its `after` to its
`through`, none of it known before (first-time news in order), is kept until the stream settles,
and a consumer at its `after` that takes all of it is sent it as it came (`pieces.whole`): nothing
changes the knowledge of those ticks before then but a forget or a doubt, which lower the horizon
below its `through`, and the cache is bounded only when the stream settles.

Filtering (interest.py has the protocol): `pieces_for` may be given a child's filter summary; a D
tick whose record it does not match goes to that child as F (the cache decodes a record's channel
and attributes once). `doubt_after` turns F ticks after a position back into Q: they may have been
silence for a narrower summary than this broker now asks for.

Invariants: `horizon` only moves with the knowledge (it drops only when ticks are forgotten);
every consumer's `sent_through` <= `horizon` unless it started after it; the cache holds at most
`cache_bytes_max` bytes of records, all of D ticks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from itertools import islice

from tidings.core.event import TICK_MAX
from tidings.core.reliability import pieces
from tidings.core.reliability.consumers import Consumer
from tidings.core.reliability.curiosity import StreamCuriosity
from tidings.core.reliability.ghosts import Ghosts
from tidings.core.reliability.pieces import Arrival, Piece
from tidings.core.reliability.record_cache import RecordCache
from tidings.core.reliability.sparse import SparseSilence
from tidings.core.reliability.summary import Summary
from tidings.core.reliability.ticks import Curiosity, Knowledge, KnowledgeMap

KNOWN = frozenset({Knowledge.D, Knowledge.F, Knowledge.L})
SPARSE_RANGES_MAX = 1024  # ranges one catchup's sparsen leaves unknown (each run costs every gap scan)
GAP = frozenset({Knowledge.Q})


@dataclass(frozen=True, slots=True)
class StreamLimits:
    cache_bytes_max: int
    nack_ranges_max: int  # ranges in one nack
    nack_range_ticks_max: int  # width of one nacked range
    piece_bytes_max: int  # record bytes in one message to a consumer (one larger record goes alone)
    nack_merge_ticks: int = 100_000  # a catchup's wanted ticks this close are fetched as one range
    # a local subscription blocked this far behind the horizon no longer holds the ack sent upstream
    # (0: it always does): the pubend's flow window (flow_window.py) paces the tree by that ack
    lag_ticks_max: int = 0


class Istream:
    __slots__ = ("_arrival", "_cache", "_known", "acked_sent", "consumers", "curiosity", "delivered_sent", "floor",
                 "ghosts", "horizon", "limits", "origin", "point_sent", "pubend", "released_sent", "sparse", "top",
                 "tree", "upstream", "waiting")

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
        self._cache = RecordCache(limits.cache_bytes_max)  # the D ticks' records consumers may need (record_cache.py)
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
        self._arrival: Arrival | None = None  # what just arrived, as it came, until the push's `settle`

    # ---- consumers -----------------------------------------------------------------------------

    def attach(self, key: str | int, position: int, start: int | None = None) -> Consumer:
        """Add (or reposition) a consumer that has everything up to `position`."""
        consumer = self.consumers.get(key)
        if consumer is None:
            first = position if start is None else start
            consumer = self.consumers[key] = Consumer(key, first, position, position)
            self.ghosts.back(key)
        else:
            consumer.back_to(position)
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
        consumer.back_to(position)
        if position < self.floor:
            self._lower_floor(position)
        self._doubt_sparse(position)

    def rewind_complete(self, key: str | int, ranges: Sequence[tuple[int, int]]) -> int:
        """A child lacks `ranges` and, of their span, nothing else (a complete nack): sent again
        from the first, and where the stream is taken below its floor only those ticks are fetched;
        the rest there is that child's silence alone (sparse.py), never sent to a child. Returns
        how many ticks became such silence."""
        consumer = self.consumers.get(key)
        position = ranges[0][0]
        if consumer is None or position >= consumer.sent_through:
            return 0
        consumer.ask(tuple(ranges))
        floor = min([self.floor, *(c.sent_through for k, c in self.consumers.items() if k != key)])
        if position < self.floor:
            self._lower_floor(position)
        made: list[tuple[int, int]] = []
        if position < floor:
            wanted = [(max(lo, position), min(hi, floor)) for lo, hi in ranges if lo < floor]
            made = self._known.sparsen(position, floor, wanted)
            self.sparse.mark(made)
        for lo, hi in ranges:
            self._doubt_sparse(lo, hi)
        self._advance_horizon()
        return sum(hi - lo for lo, hi in made)

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
        fresh, self.top = self.top <= after, max(self.top, through)  # fresh: (after, through] all unknown
        self._known.accumulate(after, through, ticks)
        size = self._cache.add(ticks, records, self._lowest_wanted())
        moved = self._advance_horizon()  # the cache is bounded after the consumers were served
        self._arrival = Arrival(after, through, ticks, records, size) if fresh and self.horizon == through else None
        return moved

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
        """What `consumer` can be sent now: (sent_through, min(horizon, bound)] in messages of at most
        `piece_bytes_max` of records, stopping before the first D tick whose record was dropped (that
        tick is forgotten, to be nacked); D ticks `summary` does not match as F; each run of L ticks
        after the consumer's start as a piece of its own, `lost`. Advances its `sent_through`."""
        upper = min(self.horizon, bound)
        if consumer.blocked or consumer.sent_through >= upper:
            return []
        if consumer.asked:
            out = self._asked_pieces(consumer, upper, summary)
            if consumer.asked or consumer.sent_through >= upper:
                return out
            return out + self.pieces_for(consumer, bound, summary)
        out = self._pieces(consumer.sent_through, upper, consumer.start, summary)
        if out:
            consumer.sent_through = out[-1].through
        return out

    def _asked_pieces(self, consumer: Consumer, upper: int, summary: Summary | None) -> list[Piece]:
        """The ranges a child's complete nack asked for (Consumer.ask), up to `upper`; past the last
        of them it goes on from where it was before (`asked` cleared). What lies between them it
        knows: it is not sent, so no record of it is needed."""
        out: list[Piece] = []
        for lo, hi in consumer.asked:
            if hi <= consumer.sent_through:
                continue
            after, through = max(lo, consumer.sent_through), min(hi, upper)
            if after >= through:
                return out
            part = self._pieces(after, through, consumer.start, summary)
            out += part
            consumer.sent_through = part[-1].through if part else after
            if consumer.sent_through < hi:
                return out  # (at `upper`, or before a dropped record: that tick is forgotten, to be nacked)
        consumer.sent_through = max(consumer.sent_through, min(consumer.asked_through, upper))
        if consumer.sent_through >= consumer.asked_through:
            consumer.asked = ()
        return out

    def _pieces(self, after: int, upper: int, start: int, summary: Summary | None) -> list[Piece]:
        """Knowledge of (after, upper] (all known) for a consumer that starts at `start`, as
        `pieces_for` describes (pieces.py); it stops before a D tick whose record was dropped."""
        if summary is None and (whole := pieces.whole(self._arrival, after, upper, start, self.limits.piece_bytes_max)):
            return [whole]  # what just arrived, as it came: the one piece the cut would make of it
        matches = None if summary is None else partial(self._cache.matches, summary)
        out, dropped = pieces.cut(self._known.runs(after, upper), self._cache.records, after, start,
                                  self.limits.piece_bytes_max, matches)
        if dropped is not None:
            self._forget_from(dropped)
        return out

    def ready_through(self, consumer: Consumer, bound: int) -> int:
        """How far `consumer` could be sent now, up to `bound`: the horizon, or just before the first D tick
        whose record was dropped (that tick is forgotten, to be nacked); never less than what it was sent."""
        upper = min(self.horizon, bound)
        after = consumer.sent_through
        dropped = pieces.first_dropped(self._known.runs(after, upper) if after < upper else (), self._cache.records)
        if dropped is not None:
            self._forget_from(dropped)
            return max(consumer.sent_through, dropped - 1)
        return max(consumer.sent_through, upper)

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
        records = self._cache.records
        for lo, hi, value in self._known.runs(tick - 1, max(tick, self.horizon)):
            if value is not Knowledge.D:
                continue
            for t in range(lo + 1, hi + 1):
                if t not in records:
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
        """Drop what nobody needs, then, past the byte limit, the oldest records (record_cache.py).
        Called once the consumers have been sent what arrived."""
        if self._cache:
            self._cache.bound(self._lowest_wanted())

    @property
    def cache_evicted(self) -> int:
        """Records the cache let go past its bound while a consumer still wanted them."""
        return self._cache.evicted

    @property
    def cache_bytes(self) -> int:
        return self._cache.size_bytes

    def cached(self) -> list[tuple[int, bytes]]:
        """The records the cache holds, (tick, record), in its order: oldest arrival first."""
        return self._cache.items()

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

    def flow_point(self) -> int:
        """The ack point sent upstream: `ack_point`, except that a local subscription whose
        connection is blocked and which is more than `lag_ticks_max` behind the horizon does not
        hold it. The pubend's flow window paces the whole tree by this ack: one subscriber that
        cannot keep up holds the others back by at most that lag, then falls behind alone (its
        records wait in this stream's bounded cache, and what the cache let go it nacks, as before
        flow control); its release and delivered points still hold release (`release_points`)."""
        lag = self.limits.lag_ticks_max
        if not lag:
            return self.ack_point()
        horizon = self.horizon
        point = horizon
        for c in self.consumers.values():
            if not c.local:
                point = min(point, c.acked_through)
            elif not c.blocked or horizon - c.sent_through <= lag:
                point = min(point, c.sent_through)
        return point

    def acked(self, key: str, through: int, released: int, delivered: int) -> None:
        consumer = self.consumers.get(key)
        if consumer is not None and consumer.acked(through, released, delivered, self.horizon):
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

    def settle(self, now: int, held: int | None) -> tuple[int, int, int] | None:
        """The consumers were served: the ack to send upstream now, (point, released, delivered), or None
        when it would tell nothing new (`held`: as for `release_points`); then the cache and the memory
        are bounded, what arrived forgotten (`pieces.whole`). A consumer that went back (a catchup, a
        child's nack) is acknowledged again from below what was acknowledged before (source.py paces)."""
        self._arrival = None
        released, delivered = self.release_points(now, held)
        point = self.flow_point()
        self.point_sent = min(self.point_sent, point)
        ack = None
        if self.upstream is not None and (point > self.point_sent or released != self.released_sent
                                          or delivered != self.delivered_sent):
            self.acked_sent = max(point, self.acked_sent)
            self.point_sent = point
            self.released_sent, self.delivered_sent = released, delivered
            ack = (point, released, delivered)
        self.bound_cache()
        self.bound_memory()
        return ack

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
                "cache_bytes": self._cache.size_bytes, "acked": self.acked_sent, "released": self.released_sent,
                "upstream": self.upstream, "consumers": len(self.consumers)}


__all__ = ["TICK_MAX", "Consumer", "Curiosity", "Istream", "Piece", "StreamLimits"]
