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
release and delivered points stay where they were (`hold_at`, `hold_delivered`).

Empty trees (`counts`). A tree whose root says it has no members (Scribe's TREE_EMPTY) counts for
release, and is sent what its root has not acknowledged past "empty", only while brokers below may
still need it: for `release_hold_ns` after the pubend first found it empty, and only if the pubend
knew it to have members (`reported`: a root acknowledged its stream, or the stream it replaced,
which was forgotten idle with everything acknowledged and released; or a restart left it unknown).
A tree whose only subscriber broker failed looks empty: that broker, restarted within the hold,
rejoins and its acks report its durable subscriptions' release before the tree stops counting. A
tree said empty that the pubend never knew to have members (a prefix tree of the channel nobody
subscribes to) has nobody below to wait for or send to: it neither holds release nor is sent
anything, and its stream is dropped (`drop`), as is one empty for longer than the hold. When it gets
members, its root says TREE_ACTIVE (Source.activated) and its next event starts a new stream.

What this cannot know: a durable subscription whose broker is down when the pubend first sends on
its tree (no stream, or one forgotten past `known_max`) is not waited for; its broker, back,
nacks what it lacks from the log, which keeps released events `release_keep_ns` (1 h by default).

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
    # the pubend knew the tree to have members (a root reported for it; or, after a restart, it may
    # have had some): said empty, it still counts for `release_hold_ns` (SourceStreams.counts)
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
        # trees whose streams were forgotten idle while they had members (oldest first, at most
        # `known_max`): the next stream of one is `reported` from its start
        self._known: dict[str, None] = {}
        self.known_max = trees_max
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
        """The stream is idle, everything acknowledged and released: gone, its members remembered."""
        if self._streams.pop(tree).reported:
            self._known.pop(tree, None)
            if len(self._known) >= self.known_max:
                del self._known[next(iter(self._known))]
            self._known[tree] = None

    def drop(self, tree: str) -> None:
        """The tree no longer counts (`counts`): its stream goes, with nothing remembered."""
        del self._streams[tree]

    def counts(self, now: int, stream: TreeStream, empty: bool) -> bool:
        """Whether `stream`'s tree counts for release and is sent past its root's "empty", its root
        having said it is `empty` (or not): it does while it may have members, and for
        `release_hold_ns` after it was found empty if the pubend knew it to have had some."""
        if not empty:
            stream.empty_since = None
            return True
        if stream.empty_since is None:
            stream.empty_since = now
        return stream.reported and now - stream.empty_since < self._release_hold_ns

    def new(self, tree: str, sent_through: int, now: int) -> TreeStream | None:
        if len(self._streams) >= self._trees_max:  # the limit: knowledge for this tree reaches
            if self.refused_from is None:          # brokers when they nack it, and nobody
                self.refused_from = sent_through   # reports its release: hold it from here
            return None
        stream = self._streams[tree] = TreeStream(sent_through, sent_through, now, released_through=sent_through,
                                                  delivered_through=sent_through)
        if tree in self._known:
            del self._known[tree]
            stream.reported = True
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
        """The streams whose trees count for release (`counts`)."""
        return [stream for tree, stream in self._streams.items() if self.counts(now, stream, self._empty(now, tree))]

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
