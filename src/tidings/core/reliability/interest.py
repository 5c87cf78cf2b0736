"""A tree's interest at one broker: the filter-summary epoch protocol (the paper's filtering brokers).

Theory of operation. Each broker keeps, per child of a tree, the filter summary the child last
sent (summary.py; a child that sent none is "everything") and sends the child a D tick whose record
the summary does not match as F: branches with no interest get silence, not data. Knowledge to a
child is stamped with the epoch of the summary it was filtered by. A broker's own summary for a
tree (its *interest*) merges its local subscriptions' patterns and filters and its children's
summaries; it goes to the parent in the SUBSCRIBE (join or repair) and in SUMMARY whenever it
changes.

Narrowing is safe at once. Widening is not: ticks after the new interest's start may already be F
here, or in flight as F. So a widening broker (1) bumps its epoch and takes F ticks only from
knowledge stamped with it (D from anything), (2) turns its F ticks after the widening's start back
to Q (`Istream.doubt_after`), and (3) sends SUMMARY with that start; the parent rewinds the child to
it (as for a nack) and re-sends filtered by the wider summary, after doing the same one level up
unless its own knowledge after that point was already filtered by a summary covering the new one
(`valid_from`). The root takes everything from the pubend; a broker that a repair made root doubts
too what its old parent had filtered for it: for the consumers that widened its interest, and for
any that comes later with a position before theirs (`valid_from`); a child's nack from before
`valid_from` doubts likewise (its F ticks there are fetched again, `nacked_before`). A stale stamp
(a lost or reordered SUMMARY) makes the child send its SUMMARY again, at most once per GCT
(`stale_stamp`).

The interest is kept as its parts come and go (`MergeCounts`, summary.py): a local subscription
that comes or goes is counted in or out (`own_added`, `own_removed`), a child's summary when it
changes, so a SUBSCRIBE costs the same with 10 subscriptions on the tree or 100,000 (it cost O(n)
when every one re-merged all of them: bench/scale_subs.py, docs/benchmarks.md).

One `Interest` per tree. It decides; the reliability node gives it the tree's streams, this broker's
own parts of the interest (local and recorded subscriptions), the tree's shape as Scribe last told
it (children, root, parent) and the broker's clock, and sends what it returns (`SendSummary`).
Epochs increase and start from the broker's clock (microseconds), so a SUMMARY from before a
restart, arriving late, never names an epoch the restarted broker uses again.

It has no timer (the re-send after a stale stamp is rate-limited by a stamp, not scheduled), and
keeps the machines' contract with no deadline.

Invariants: `epoch` only grows; knowledge after `valid_from` came filtered by summaries covering
`sent`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tidings.core.event import TICK_MAX, record_routing_fields
from tidings.core.reliability.istream import Istream
from tidings.core.reliability.messages import SummaryUpdate
from tidings.core.reliability.summary import EVERYTHING, MergeCounts, Summary, covers, whole_tree
from tidings.core.reliability.summary import to_wire as summary_wire
from tidings.core.wire.packable import WireArray


@dataclass(frozen=True, slots=True)
class SendSummary:
    """SUMMARY `message` to the broker at `address` (the parent, or where stale knowledge came from)."""

    address: str
    message: SummaryUpdate


class Interest:
    __slots__ = ("_children", "_counted", "_parts", "_redoubted", "_resent_ns", "epoch", "gap_curiosity_ns", "sent",
                 "summary_bytes_max", "tree", "valid_from")

    def __init__(self, tree: str, summary_bytes_max: int, gap_curiosity_ns: int) -> None:
        self.tree = tree
        self.summary_bytes_max = summary_bytes_max
        self.gap_curiosity_ns = gap_curiosity_ns  # a stale stamp's SUMMARY again at most once per this
        # child address -> (epoch, summary) it asked for; a child absent here gets everything, unstamped
        self._children: dict[str, tuple[int, Summary | None]] = {}
        self.sent: Summary | None = EVERYTHING  # this broker's interest, as last told to its parent
        self.epoch = 0  # of `sent`: knowledge stamped otherwise gives D ticks only
        self.valid_from = 0  # knowledge after this tick came filtered by summaries covering `sent`
        # pubend -> F ticks after this were made Q again for a child's nack below `valid_from` (what came
        # since was filtered by `sent`, or is the pubend's own at the root): a repeated nack needs no new doubt
        self._redoubted: dict[str, int] = {}
        self._resent_ns: int | None = None  # when SUMMARY was last sent again after a stale stamp
        self._parts = MergeCounts()  # this broker's own parts of the interest and those of `_counted`
        self._counted: dict[str, Summary | None] = {}  # child -> its part counted in `_parts`

    # ---- children ------------------------------------------------------------------------------

    def filter_for(self, child: str) -> tuple[int | None, Summary | None]:
        """(epoch, summary) to filter and stamp what goes to `child` by (unstamped everything when
        it asked for nothing)."""
        return self._children.get(child, (None, EVERYTHING))

    def child_joined(self, child: str, asked: tuple[int, Summary | None] | None) -> None:
        """`child` joined (or re-joined) asking for `asked` (None: an old peer, sent everything)."""
        if asked is None:
            self._children.pop(child, None)
        else:
            self._children[child] = asked

    def child_left(self, child: str) -> None:
        self._children.pop(child, None)

    def child_summary(self, child: str, update: SummaryUpdate,
                      istreams: Mapping[str, Istream]) -> tuple[dict[str, int], int] | None:
        """A child's SUMMARY: filter by it from now on; after a widening, rewind the child to
        `update.since` on every stream. Returns where the consumers whose wants grew resume (per
        pubend, and for the others), for `resummarize`; None for a stale or repeated SUMMARY."""
        held = self._children.get(child)
        if held is not None and update.epoch <= held[0]:
            return None  # stale, or a duplicate
        self._children[child] = (update.epoch, update.summary)
        positions: dict[str, int] = {}
        widened = not covers(EVERYTHING if held is None else held[1], update.summary)
        if widened:
            for pubend, ist in istreams.items():
                ist.rewind(child, update.since)
                consumer = ist.consumers.get(child)
                if consumer is not None:
                    positions[pubend] = consumer.sent_through
        return positions, update.since if widened else TICK_MAX

    # ---- this broker's interest --------------------------------------------------------------------

    def own_added(self, part: Summary | None) -> None:
        """One of this broker's own parts of the interest (a local subscription's or a recorded
        registration's summary) came."""
        self._parts.add(part)

    def own_removed(self, part: Summary | None) -> None:
        """One of this broker's own parts of the interest, added before, went."""
        self._parts.remove(part)

    def wanted(self, children: Sequence[str], bytes_max: int | None = None) -> Summary | None:
        """What this broker's own parts and `children` want, merged (within `bytes_max`, the
        summary limit unless given): `merge` of them all, counted in as they changed."""
        counted = self._counted
        for child in children:
            part = self._children.get(child, (0, EVERYTHING))[1]
            if child not in counted:
                self._parts.add(part)
            elif counted[child] is not part:
                self._parts.add(part)
                self._parts.remove(counted[child])
            counted[child] = part
        present = set(children)
        if len(counted) > len(present):  # a child left
            for child in [c for c in counted if c not in present]:
                self._parts.remove(counted.pop(child))
        return self._parts.merged(self.summary_bytes_max if bytes_max is None else bytes_max)

    def for_join(self, interest: Summary | None, wall_us: int) -> WireArray:
        """[epoch, summary] for a SUBSCRIBE carrying `interest` (what the new parent filters by)."""
        if interest != self.sent:  # (a root's is not kept up to date: nobody filters for it)
            self.sent = interest
            self._next_epoch(wall_us)
        return [self.epoch, summary_wire(self.sent)]

    def resummarize(self, interest: Summary | None, root: bool, parent: str | None, istreams: Mapping[str, Istream],
                    positions: dict[str, int], since: int, wall_us: int) -> list[SendSummary]:
        """The tree's interest may have changed to `interest`; `positions` (per pubend, `since` for
        the others) are where consumers whose wants grew resume. A narrowing is told to the parent;
        a widening not covered by what this broker already holds doubts its F ticks after those
        positions and tells the parent to send from there again. The root has no parent to tell, and
        is sent everything, but doubts too when what it holds was filtered while it was a forwarder."""
        wider = not covers(self.sent, interest) or min([*positions.values(), TICK_MAX]) < self.valid_from
        if root:
            # the pubend sends the root everything, but a root that was a forwarder before (a repair
            # made it root) holds knowledge its old parent filtered by `sent`: for a wider interest
            # its F ticks after the new consumers' positions prove nothing, and are asked of the
            # pubend again; so for a consumer that comes later with an earlier position
            # (`valid_from`: a second child re-joining after the repair, sim seed 1025)
            if wider:
                self._doubt(istreams, positions, since)
                self.sent = interest  # and knowledge its old parent still stamps with the old epoch (a
                self._next_epoch(wall_us)  # partition healing) is not believed: its F ticks prove nothing
            return []
        if interest == self.sent and not wider:
            return []
        self.sent = interest
        self._next_epoch(wall_us)
        if not wider:
            return self._send(parent, TICK_MAX)
        return self._send(parent, min([since, *self._doubt(istreams, positions, since)]))

    def stale_stamp(self, now: int, upstream: str, stamp: int, istreams: Mapping[str, Istream]) -> list[SendSummary]:
        """Knowledge came filtered by another epoch than ours: SUMMARY again (at most once per GCT)."""
        if self._resent_ns is not None and now - self._resent_ns < self.gap_curiosity_ns:
            return []
        self._resent_ns = now
        self.epoch = max(self.epoch, stamp + 1)  # past any epoch the parent holds
        since = min([TICK_MAX, *(ist.horizon for ist in istreams.values())])  # where our doubt starts
        return [SendSummary(upstream, SummaryUpdate(self.tree, self.epoch, self.sent, since))]

    def nacked_before(self, ist: Istream, after: int) -> None:
        """A child nacked `ist` from `after`: F ticks it would be sent from before the point where this
        broker's knowledge became good for its interest are Q again."""
        good = min(self.valid_from, self._redoubted.get(ist.pubend, TICK_MAX))  # knowledge after it is good for it
        if after < good:
            # the child wants ticks from before the point where this broker's knowledge became
            # good for its interest (`valid_from`): its F ticks there may be silence for a
            # narrower summary (an old parent's filtering, before a widening or a repair made
            # this broker root). The child's SUBSCRIBE position was past them, but a child can
            # go back later: a total-order subscription's merge waits a clock-skew allowance,
            # its records leave the small stream cache meanwhile, and the stream forgets them
            # and nacks (Istream._forget_from). Answering with those F ticks turned its events
            # into silence, lost for good (sim seeds 2, 3, 5, 6, 8, 10 of the total-order
            # scenario with a root crash: 59-119 events). They are fetched again instead.
            ist.doubt_after(after, good)
            self._redoubted[ist.pubend] = after

    def unwanted(self, records: Iterable[bytes], children: Sequence[str]) -> int:
        """How many of `records` no subscription here or below (this broker's own and its
        `children`'s, merged with no size limit) matches: the filtering's measure."""
        wanted = self.wanted(children, TICK_MAX)
        if wanted is None or whole_tree(wanted, self.tree):  # every record is wanted: no need to look at any
            return 0
        count = 0
        for record in records:
            fields = record_routing_fields(record)
            if fields is not None and not wanted.matches(fields.channel, fields.attributes):
                count += 1
        return count

    # ---- the machines' contract ------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        return None

    def handle_timeout(self, now: int) -> list[SendSummary]:
        return []

    # ---- inside ------------------------------------------------------------------------------------

    def _doubt(self, istreams: Mapping[str, Istream], positions: dict[str, int], since: int) -> list[int]:
        """F ticks after the new consumers' positions (`since` for the other pubends) are Q again;
        what this broker holds after the highest of those points is good for its interest."""
        points = [positions.get(pubend, min(since, ist.horizon)) for pubend, ist in istreams.items()]
        for point, ist in zip(points, istreams.values(), strict=True):
            ist.doubt_after(point)
        self.valid_from = max(points, default=0)  # no knowledge here yet: all of it will be good
        self._redoubted.clear()
        return points

    def _next_epoch(self, wall_us: int) -> None:
        self.epoch = max(self.epoch + 1, wall_us)

    def _send(self, parent: str | None, since: int) -> list[SendSummary]:
        """SUMMARY to the parent: after a widening, `since` is the tick after which it must send
        again (TICK_MAX: nothing; pubends this broker has no stream of resume where they are)."""
        if parent is None:  # joining: the SUBSCRIBE carries the interest
            return []
        return [SendSummary(parent, SummaryUpdate(self.tree, self.epoch, self.sent, since))]


__all__ = ["Interest", "SendSummary"]
