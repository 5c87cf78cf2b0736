"""The pubend's tree streams: what each tree was sent and acknowledged, and what it holds of release.

Theory of operation (Gryphon exactly-once §2.2, release). The pubend keeps one `TreeStream` per
tree it sends knowledge on, at most `trees_max`: how far knowledge was sent, how far the tree's
root acknowledged it, the root (as its ACKs tell: first-time data goes straight there), and the
root's report of the tree's release point (`released`: what every durable subscription below
released) and delivered point (`delivered`: what every subscriber below that keeps up has).

This pubend's Tr and Td are the smallest of those over the trees with members. A tree whose root
has not reported yet holds release where its stream began; a tree refused for `trees_max` holds it
for good from its first tick (`refused_from`), since nobody reports for it.

Holds. A root the pubend has not heard from before on a tree (the old one failed, or the pubend
restarted) may report before the brokers below have found it: for `release_hold_ns` the tree's
release and delivered points stay where they were (`hold_at`, `hold_delivered`). A tree whose only
subscriber broker failed looks empty: a tree that loses its members still counts for
`release_hold_ns` after the pubend first found it empty (`empty_since`); so does, for now, a
tree that never had members (`reported` false), though nobody below waits for it.

After a restart the trees whose release was held when the broker's durable state was last saved
(`held_trees`) come back with their release points (`restore`); trees found in the log's recent
tail come back unacknowledged, held from 0 (`recovered`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tidings.core.event import TICK_MAX


@dataclass(slots=True)
class TreeStream:
    sent_through: int  # knowledge of every tick up to here has been sent on the tree
    acked_through: int
    data_ns: int  # when data was last sent on it
    root: str | None = None  # the rendez-vous point, as its ACKs tell: first-time data goes straight there
    released_through: int = 0  # what every durable subscription below the root released, as it reported
    delivered_through: int = 0  # what every subscriber below the root that keeps up has, as it reported
    # a root that is new to the pubend (a repair, or a restart) may not have heard from every broker
    # below yet: until `hold_until` (monotonic ns) the tree's release stays at most `hold_at`
    hold_at: int = 0
    hold_delivered: int = 0  # and its delivered point at most this
    hold_until: int = 0
    empty_since: int | None = None  # when the pubend first found the tree without members
    # a root reported for the tree (or, after a restart, it may have had members): it may have had
    # members, and an empty tree that never had any holds nothing
    reported: bool = False

    @property
    def owed(self) -> bool:
        """The root has not acknowledged all the knowledge sent on the tree."""
        return self.acked_through < self.sent_through


class SourceStreams:
    """The pubend's streams by tree; `empty(now, tree)` says whether the tree's root said it has
    no members (Scribe's TREE_EMPTY)."""

    def __init__(self, trees_max: int, release_hold_ns: int, empty: Callable[[int, str], bool]) -> None:
        self._trees_max = trees_max
        self._release_hold_ns = release_hold_ns
        self._empty = empty
        self._streams: dict[str, TreeStream] = {}
        self.refused_from: int | None = None  # the first tick of a tree refused for trees_max

    def __len__(self) -> int:
        return len(self._streams)

    def __contains__(self, tree: str) -> bool:
        return tree in self._streams

    def get(self, tree: str) -> TreeStream | None:
        return self._streams.get(tree)

    def items(self) -> list[tuple[str, TreeStream]]:
        return list(self._streams.items())

    def forget(self, tree: str) -> None:
        del self._streams[tree]

    def empty(self, now: int, tree: str) -> bool:
        return self._empty(now, tree)

    def new(self, tree: str, sent_through: int, now: int) -> TreeStream | None:
        if len(self._streams) >= self._trees_max:  # the limit: knowledge for this tree reaches
            if self.refused_from is None:          # brokers when they nack it, and nobody
                self.refused_from = sent_through   # reports its release: hold it from here
            return None
        stream = self._streams[tree] = TreeStream(sent_through, sent_through, now, released_through=sent_through,
                                                  delivered_through=sent_through)
        return stream

    def restore(self, now: int, held: dict[str, int], last_tick: int) -> None:
        """At start: the trees `held_trees` saved become streams again, holding release where they
        did, with silence after the log's last tick until their roots acknowledge (a broker below
        that lacks earlier ticks nacks them)."""
        for tree, released in held.items():
            stream = self.new(tree, last_tick, now)
            if stream is not None:  # (the root then may not have heard from below yet: hold)
                stream.acked_through = stream.delivered_through = stream.hold_delivered = 0
                stream.released_through = stream.hold_at = min(released, last_tick)
                stream.hold_until = now + self._release_hold_ns
                stream.reported = True  # (whether it had members is not known: it may have)

    def recovered(self, now: int, tree: str, last: int) -> None:
        """At start, `tree` was found in the log's tail through `last`: unknown, so silence goes on
        until its root acks, and a hold."""
        if tree not in self._streams:
            self.new(tree, last, now)
            stream = self._streams.get(tree)
            if stream is not None:
                stream.acked_through = stream.released_through = stream.delivered_through = 0
                stream.hold_until = now + self._release_hold_ns
                stream.reported = True  # (whether it had members is not known: it may have)

    def acked(self, now: int, tree: str, through: int, root: str, released: int, delivered: int) -> None:
        """The root at `root` acknowledged the stream through `through` and reported its release
        and delivered points; a root new to the pubend is held (`release_hold_ns`)."""
        stream = self._streams.get(tree)
        if stream is None:
            return
        if stream.root is not None and root != stream.root:  # a new root: hold while the brokers below find it
            stream.hold_at, stream.hold_delivered = stream.released_through, stream.delivered_through
            stream.hold_until = now + self._release_hold_ns
        stream.root = root
        stream.reported = True
        if through > stream.acked_through:
            stream.acked_through = min(through, stream.sent_through)
        stream.released_through = min(released, stream.sent_through)
        stream.delivered_through = min(delivered, stream.sent_through)
        if now < stream.hold_until:
            stream.released_through = min(stream.released_through, stream.hold_at)
            stream.delivered_through = min(stream.delivered_through, stream.hold_delivered)

    def root_moved(self, tree: str, address: str) -> None:
        stream = self._streams.get(tree)
        if stream is not None and stream.root == address:
            stream.root = None

    def released(self, now: int, held: int | None) -> int:
        """Tr: the tick through which every durable subscription released this pubend's stream, on
        every tree with members (`held`: this broker's own durable subscriptions', None if it hosts
        none); TICK_MAX when nothing holds it."""
        points = [p for p in (held, self.refused_from) if p is not None]
        points += [stream.released_through for stream in self._counted(now)]
        return min(points, default=TICK_MAX)

    def delivered(self, now: int) -> int:
        """Td: the tick through which the subscribers of every tree with members have the stream
        (TICK_MAX: no such tree)."""
        return min((s.delivered_through for s in self._counted(now)), default=TICK_MAX)

    def _counted(self, now: int) -> list[TreeStream]:
        """The streams whose trees count for release: those with members, and for
        `release_hold_ns` those that lost them (a tree whose only subscriber broker failed looks
        empty too); an empty tree that never had members does not count."""
        out = []
        for tree, stream in self._streams.items():
            if not self._empty(now, tree):
                stream.empty_since = None
            elif stream.empty_since is None:
                stream.empty_since = now
            # members, or lost them lately (holding a tree that never had any too, for now: not
            # counting it gave an away durable subscriber gaps, tests/sim/test_delivery.py seed 0)
            if stream.empty_since is None or now - stream.empty_since < self._release_hold_ns:
                out.append(stream)
        return out

    def held_trees(self) -> dict[str, int]:
        """The trees whose durable subscriptions have not released all that was sent, with their
        release points: saved with the broker's durable state, since after a restart the pubend
        would not otherwise know of a tree that has been quiet since (`restore`)."""
        return {tree: s.released_through for tree, s in self._streams.items()
                if s.released_through < s.sent_through}

    def unacknowledged(self, now: int) -> int:
        """Trees with members whose root has not yet acknowledged all the knowledge sent on them:
        a draining broker waits for none to be left, or its events would wait for its restart."""
        return sum(1 for tree, s in self._streams.items() if s.owed and not self._empty(now, tree))

    @property
    def roots_known(self) -> int:
        return sum(1 for s in self._streams.values() if s.root)
