"""Curiosity: when a stream nacks its gaps, and how often it asks again (GCT, NRT, backoff, Karn).

Theory of operation (Gryphon exactly-once, §3.2). Q ticks a stream's consumers wait for (its gaps,
`Istream.gaps`) make it *curious*. A gap in live knowledge waits the gap curiosity threshold (GCT):
its ticks may still be on their way. Ticks the stream had been past and needs again (`recalled`: a
catchup's or a rewound child's position below the floor, silence doubted, a record the cache
dropped) are not in flight, and their gap is nacked at once. A nack names only ticks not nacked
since the curiosity was last cleared (the C ticks of the stream's `CuriosityMap`), so nacks that
many children's gaps cause upstream are consolidated.

An unanswered nack is repeated after the nack repetition threshold (NRT), counted from when the
curiosity was last cleared, not from the last nack: gaps that keep appearing beyond an old one are
nacked at once, and must not keep the old one quiet. Nor is it repeated while the doubt horizon
moves: the answer is arriving (a long one takes seconds), and asking again would have the pubend
read and send it twice. NRT is estimated per upstream broker from the nacks' round trips as TCP
estimates its RTO (round_trip.py): the first answer to a nack is a sample; after a repeated nack
none is (Karn's rule). A nack unanswered for NRT while upstream stayed silent backs off (doubling,
up to `nack_repeat_ns_max`: upstream or the pubend above it may be down); one unanswered while
upstream was heard from repeats at the round-trip estimate (the nack or its answer was lost).

States of one stream (`CuriosityState`), driven by `_MOVES` on four events: a gap seen (GAP),
the gaps closed (CLOSED), a first nack of a round (NACK), a nack repeated after NRT (REPEAT):

    QUIET --GAP--> CURIOUS --NACK--> NACKED --REPEAT--> REPEATING (--REPEAT--> REPEATING)
      any state --CLOSED--> QUIET;  QUIET --NACK--> NACKED (a catchup's PFS wait lapsed)

`StreamCuriosity` is one stream's state and fields, held by its `Istream` (which marks ticks it
recalls there); `Curiosity` is the broker's machine over all its streams: the GCT and NRT timers
in one `Deadlines`, the round-trip estimates per upstream broker, the nack counters. Its
`handle_timeout` sends `SendNack`s, or reports a tree Scribe pruned here (`TreePruned`: nobody
here wants its gaps any more) for the reliability node to drop.

Invariants: `curious_ns` is None exactly in QUIET and CURIOUS; a stream with gaps and an upstream
has its timer set.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, NamedTuple

from tidings.core.deadlines import Alarm, Deadlines
from tidings.core.reliability.messages import Nack
from tidings.core.reliability.round_trip import RoundTrip
from tidings.core.reliability.ticks import CuriosityMap, Knowledge, Range
from tidings.core.states import ForbiddenTransition

if TYPE_CHECKING:
    from tidings.core.reliability.istream import Istream

ROUND_TRIPS_MAX = 4096  # upstream brokers whose nack round trips are remembered


class CuriosityState(StrEnum):
    QUIET = "quiet"  # no gap waited for
    CURIOUS = "curious"  # a gap waits GCT (its ticks may still be on their way), nothing nacked yet
    NACKED = "nacked"  # nacked since the gaps last closed: asked again only after NRT
    REPEATING = "repeating"  # a nack went unanswered for NRT and was repeated: no round-trip sample (Karn)


class CuriosityEvent(StrEnum):
    GAP = "gap"  # the stream changed and has gaps
    CLOSED = "closed"  # the stream changed and has none
    NACK = "nack"  # its timer found gaps with no nack out: a first nack
    REPEAT = "repeat"  # its timer found a nack unanswered for NRT: asked again


QUIET, CURIOUS, NACKED, REPEATING = CuriosityState
_MOVES: dict[tuple[CuriosityState, CuriosityEvent], CuriosityState] = {
    (QUIET, CuriosityEvent.GAP): CURIOUS,
    (CURIOUS, CuriosityEvent.GAP): CURIOUS,
    (NACKED, CuriosityEvent.GAP): NACKED,
    (REPEATING, CuriosityEvent.GAP): REPEATING,
    **{(state, CuriosityEvent.CLOSED): QUIET for state in CuriosityState},
    (QUIET, CuriosityEvent.NACK): NACKED,
    (CURIOUS, CuriosityEvent.NACK): NACKED,
    (NACKED, CuriosityEvent.REPEAT): REPEATING,
    (REPEATING, CuriosityEvent.REPEAT): REPEATING,
}


@dataclass(frozen=True, slots=True)
class CuriosityConfig:
    gap_curiosity_ns: int  # GCT
    nack_repeat_ns_min: int  # NRT floor
    nack_repeat_ns_max: int  # NRT after backoff
    complete: bool = True  # a nack may say it is complete over its span (to an upstream that understands it)


class GapTimer(NamedTuple):
    tree: str
    pubend: str


@dataclass(frozen=True, slots=True)
class SendNack:
    """NACK `message` to the broker at `address` (the stream's upstream)."""

    address: str
    message: Nack


@dataclass(frozen=True, slots=True)
class TreePruned:
    """Scribe pruned `tree` here and no local subscription has it: nobody here wants its gaps."""

    tree: str


CuriosityEffect = SendNack | TreePruned


class StreamCuriosity:
    """One stream's curiosity: its state, the ticks it asked for (C), and the times the rules use."""

    __slots__ = ("_acked", "_asked", "curious_ns", "heard_ns", "moved_ns", "nack_interval_ns", "nack_ns", "recalled",
                 "state")

    def __init__(self) -> None:
        self.state = QUIET
        self._asked = CuriosityMap()  # C: ticks nacked since the curiosity was last cleared
        self._acked = 0  # every consumer is past it: A in `_asked` once it is next read (`fresh`)
        self.nack_ns: int | None = None  # when the last nack left
        self.curious_ns: int | None = None  # when the nacked ticks were last forgotten (NRT counts from it)
        self.nack_interval_ns = 0  # NRT now: doubles while nacks go unanswered and upstream is silent
        self.heard_ns: int | None = None  # when knowledge of this stream last came from upstream
        self.moved_ns: int | None = None  # when knowledge from upstream last moved the horizon
        # ticks up to here became unknown again after the stream was past them (a lowered floor,
        # doubted silence, a forgotten record): not in flight, so their gap is nacked without GCT
        self.recalled = 0

    def recall(self, through: int) -> None:
        """Ticks up to `through` are needed again after the stream was past them."""
        self.recalled = max(self.recalled, through)

    def forget(self) -> None:
        """Ticks nacked without an answer may be nacked again (NRT passed, or silence was doubted)."""
        self._asked = CuriosityMap()
        self._acked = 0

    def acked_through(self, tick: int) -> None:
        """Every consumer is past `tick`: nothing up to it is asked for again. Noted here, and
        marked in the map when it is next read (the stream's ack point moves with every event; its
        nacks are rare)."""
        self._acked = max(self._acked, tick)

    def fresh(self, gaps: list[tuple[int, int]], ranges_max: int) -> list[Range]:
        """Of `gaps`, the ranges not nacked since the last `forget`, now marked asked (C)."""
        if self._acked:
            self._asked.ack_through(self._acked)
        out: list[Range] = []
        for after, through in gaps:
            out += self._asked.curious(after, through)
        return out[:ranges_max]

    def move(self, event: CuriosityEvent) -> None:
        new = _MOVES.get((self.state, event))
        if new is None:
            raise ForbiddenTransition(f"curiosity: {event} in {self.state}")
        self.state = new


class Curiosity:
    """The nack scheduling of every stream of the broker."""

    __slots__ = ("_pruned", "_round_trips", "_streams", "_takes_complete", "config", "nack_ticks_sent", "nacks_sent",
                 "timers")

    def __init__(self, config: CuriosityConfig, pruned: Callable[[str], bool], alarm: Alarm | None = None,
                 takes_complete: Callable[[str], bool] = lambda address: True) -> None:
        self.config = config
        self._pruned = pruned  # Scribe pruned this tree here and nothing local has it
        # the broker at this address understands a complete nack (its link speaks wire/peer.py's
        # COMPLETE_NACKS): an older one refuses a five-element NACK and closes the link
        self._takes_complete = takes_complete
        self._streams: dict[GapTimer, Istream] = {}
        self.timers: Deadlines[GapTimer] = Deadlines(alarm)
        self._round_trips: dict[str, RoundTrip] = {}  # upstream broker -> its nack round trips
        self.nacks_sent = 0
        self.nack_ticks_sent = 0

    # ---- streams -------------------------------------------------------------------------------

    def watch(self, ist: Istream) -> None:
        self._streams[GapTimer(ist.tree, ist.pubend)] = ist

    def unwatch(self, tree: str, pubend: str) -> None:
        key = GapTimer(tree, pubend)
        self._streams.pop(key, None)
        self.timers.cancel(key)

    def state(self, tree: str, pubend: str) -> CuriosityState | None:
        ist = self._streams.get(GapTimer(tree, pubend))
        return None if ist is None else ist.curiosity.state

    # ---- inputs --------------------------------------------------------------------------------

    def heard(self, now: int, ist: Istream) -> None:
        """Knowledge of `ist` came from upstream."""
        ist.curiosity.heard_ns = now

    def moved(self, now: int, ist: Istream) -> None:
        """Knowledge from upstream moved the horizon of `ist`. The first answer to a nack is a
        round-trip sample, and NRT from it (the rest of a long answer arrives later, by how long it
        is, not by the round trip); none after a repeated nack (Karn's rule: the answer may be to an
        earlier one, or come from a pubend back from a crash; such a sample would hold NRT up for
        many rounds)."""
        c = ist.curiosity
        if c.nack_ns is not None and (c.moved_ns is None or c.moved_ns < c.nack_ns):
            c.nack_interval_ns = self._round_trip(ist.upstream, None if c.state is REPEATING else now - c.nack_ns)
        c.moved_ns = now

    def changed(self, now: int, ist: Istream) -> None:
        """`ist` changed: watch its gaps (a gap of ticks recalled is not in flight: nacked at once),
        or, with none, clear its curiosity."""
        key = GapTimer(ist.tree, ist.pubend)
        c = ist.curiosity
        gaps = ist.gaps()
        if gaps:
            c.move(CuriosityEvent.GAP)
            self.timers.set_earliest(key, now if gaps[0][0] < c.recalled else now + self.config.gap_curiosity_ns)
            return
        c.move(CuriosityEvent.CLOSED)
        self.timers.cancel(key)
        if ist.waiting:  # a catchup's PFS read that is never answered must not hold its nacks for ever
            self.timers.set(key, min(until for _, until in ist.waiting.values()))
        c.nack_ns = c.curious_ns = None
        c.nack_interval_ns = self._round_trip(ist.upstream)

    def wake(self, tree: str, pubend: str, at_ns: int) -> None:
        """Look at the stream's gaps again by `at_ns` (a catchup's wait for the PFS ends then)."""
        self.timers.set_earliest(GapTimer(tree, pubend), at_ns)

    # ---- timers ----------------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def handle_timeout(self, now: int) -> list[CuriosityEffect]:
        out: list[CuriosityEffect] = []
        pruned: set[str] = set()
        for key in self.timers.pop_due(now):
            ist = self._streams.get(key)
            if ist is None or key.tree in pruned:
                continue
            ist.lapse_waits(now)
            # Scribe pruned the tree here (its children left, none local): no knowledge comes to say
            # so, since the pubends' publishes are answered TREE_EMPTY; nobody here wants the gaps
            if self._pruned(key.tree):
                pruned.add(key.tree)
                out.append(TreePruned(key.tree))
                continue
            out += self._gap_due(now, key, ist)
        return out

    def _gap_due(self, now: int, key: GapTimer, ist: Istream) -> list[CuriosityEffect]:
        gaps = ist.gaps()  # (what follows changes the curiosity only, not the stream's knowledge)
        if not gaps:
            return []
        c = ist.curiosity
        c.recalled = 0  # (from now on GCT again, until more ticks are recalled)
        floor_ns = self.config.nack_repeat_ns_min
        interval = max(c.nack_interval_ns, floor_ns)
        if ist.upstream is None:
            self.timers.set(key, now + interval)  # repairing: ask once the tree has a parent again
            return []
        # NRT counts from when the curiosity was last cleared, and not while the horizon moves
        if c.curious_ns is None:
            c.forget()  # a new gap: nack it
            c.move(CuriosityEvent.NACK)
            c.curious_ns = now
        elif now - max(c.curious_ns, c.moved_ns or 0) >= interval:
            c.forget()  # NRT passed unanswered: nack the same ticks again
            c.nack_interval_ns = self._repeat_interval(ist, interval)
            c.move(CuriosityEvent.REPEAT)
            c.curious_ns = now
        out: list[CuriosityEffect] = []
        whole = self.config.complete and self._takes_complete(ist.upstream)
        if whole:
            end = gaps[-1][1]  # the unknown run it ends in goes on past it: chopped there
            gaps, whole = named_whole(gaps, end < ist.top and ist.knowledge(end + 1) is Knowledge.Q)
        ranges = c.fresh(gaps, ist.limits.nack_ranges_max)
        if ranges:
            c.nack_ns = now
            self.nacks_sent += 1
            self.nack_ticks_sent += sum(through - after for after, through in ranges)
            said = whole and complete(gaps, ranges)
            out.append(SendNack(ist.upstream, Nack(key.tree, key.pubend, tuple(ranges), said)))
        self.timers.set(key, now + max(c.nack_interval_ns, floor_ns))
        return out

    def _repeat_interval(self, ist: Istream, interval: int) -> int:
        """NRT after a nack went unanswered for `interval`. Upstream silent on this stream since
        the nack: it (or the pubend above it) may be down, so back off. Upstream heard since: it
        is alive, and the nack or its answer was lost; backing off would only stretch the wait (three
        lost nacks at 10 % loss cost 6 s at a 2 s NRT), so repeat at the round-trip estimate."""
        c = ist.curiosity
        if c.nack_ns is not None and c.heard_ns is not None and c.heard_ns > c.nack_ns:
            return self._round_trip(ist.upstream)
        return min(2 * interval, self.config.nack_repeat_ns_max)

    def _round_trip(self, upstream: str | None, sample_ns: int | None = None) -> int:
        """The NRT for nacks to `upstream`, after taking in `sample_ns` if given."""
        if upstream is None:
            return self.config.nack_repeat_ns_min
        estimate = self._round_trips.pop(upstream, None) or RoundTrip()
        self._round_trips[upstream] = estimate  # most recently used last: the oldest is dropped first
        if len(self._round_trips) > ROUND_TRIPS_MAX:
            del self._round_trips[next(iter(self._round_trips))]
        if sample_ns is not None:
            estimate.sample(sample_ns)
        return estimate.threshold(self.config.nack_repeat_ns_min, self.config.nack_repeat_ns_max)


def named_whole(gaps: list[tuple[int, int]], cut: bool) -> tuple[list[tuple[int, int]], bool]:
    """The gaps a nack that may say it is complete names, and whether it still may. A complete nack
    is answered with exactly its ranges, then the forwarder goes on from where it was: one ending
    inside an unknown run it could not name whole (`cut`: the run was chopped into ranges of at most
    `nack_range_ticks_max`, `nack_ranges_max` a nack, and goes on past the last) would leave the
    rest of the run unsent, to be nacked 64 ranges a round trip (a subscription from tick 0: about
    470,000 of them). So such a run is left to a later nack when other gaps come before it, and
    nacked plain when it comes first (the forwarder sends everything after its first tick)."""
    if not cut:
        return gaps, True
    first = len(gaps) - 1
    while first > 0 and gaps[first - 1][1] == gaps[first][0]:
        first -= 1
    return (gaps[:first], True) if first else (gaps, False)


def complete(gaps: list[tuple[int, int]], ranges: list[Range]) -> bool:
    """Whether `ranges` (taken from `gaps`, the stream's unknown ranges in order) name every unknown
    tick of their span: then the nack says so (`Nack.complete`), and a forwarder sends only them.
    Not so when a gap there was asked for before and is left out (its answer may still come)."""
    lo, hi = ranges[0][0], ranges[-1][1]
    unknown = sum(min(through, hi) - max(after, lo) for after, through in gaps if after < hi and through > lo)
    return unknown == sum(through - after for after, through in ranges)


__all__ = ["Curiosity", "CuriosityConfig", "CuriosityEffect", "CuriosityEvent", "CuriosityState", "GapTimer",
           "SendNack", "StreamCuriosity", "TreePruned"]
