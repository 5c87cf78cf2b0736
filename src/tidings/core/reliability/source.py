"""The pubend's side of guaranteed delivery: one knowledge stream per tree it publishes on.

Theory of operation (Gryphon exactly-once §2.2, §3.2). The pubend's log is the only stable copy of
an event. Once a sync makes a run of ticks durable, the pubend knows everything about them: for
each tree, the ticks whose events belong on that tree are D and every other tick is F. For each tree
with events in the sync it sends one first-time knowledge message (after, through], `after` being
where its previous message on that tree ended, so silence costs nothing extra: it rides in the next
data message. First-time data goes straight to the tree's rendez-vous point once the root's ACKs
have told the pubend where it is (one stream edge, which nacks follow back); everything else, and
data while the root is unknown or after it said ROOT_MOVED, travels as a routed Scribe PUBLISH,
which finds the current root after any repair (and so teaches the pubend the new one).

Trees with recent data, or whose root has not acknowledged everything, get periodic silence up to
the current time (`silence_interval_ns`): doubt horizons downstream advance, and a broker that lost
the tail of the stream sees the gap and nacks it (this is the paper's pubend-driven liveness, AET:
a silence message plays the AckExpected role). A tree whose stream is fully acknowledged and idle
for `stream_idle_ns` is forgotten: an idle pubend costs nothing. A stream whose root reports that
durable subscriptions below have not released everything sent is kept, with its periodic
silence, so their brokers' acks keep reporting how far they released (release.py).

The root's ACKs also carry the tree's release point; `released` and `delivered` are the smallest
over the trees with members (a tree whose root has not reported yet holds release where its stream
began; a tree refused for `trees_max` holds it for good, since nobody reports for it). A root the
pubend has not heard from before on a tree (the old one failed, or the pubend restarted) may report
before the brokers below have found it, and a tree whose only subscriber broker failed looks
empty: for `release_hold_ns` either way the tree's release stays where it was.

Nacks reach the pubend from a root (and, through the root, from any broker below). Each nacked
range is read back from the log (ReadLog, bounded in bytes and in reads in flight) and sent again
(straight to the root that asked when it is the root the pubend knows, else routed) as
retransmitted knowledge of exactly the range read: the events of that tree as D, every other tick
as F. Ranges beyond what is durable are clamped to the
durable tail. Ticks the log no longer holds (released: by the release protocol or the operator's
retention caps) are answered as L, a lost range, never as silence: whoever wanted them learns that
events may be missing, and a subscriber gets an explicit gap.

A nack's answer is paced by the tree's ACKs (the retransmission window). A log read returns in
microseconds what a subscriber's broker takes tens of milliseconds to deliver; read back to back,
a million-tick answer would overrun the peer link's bounded queue and the brokers' bounded caches,
whose drops are gaps nacked (and read) again. So each tree's answers keep at most
`retransmit_window_bytes` of records (reads in flight counted at `read_bytes_max`) beyond what its
root has acknowledged since the first of them was read: a read that would go past it waits
(parked, still counted in `reads_max`) until the root's ACKs move on. The root acks only what all
below it have, so this is end to end; a root whose consumer went back for the answer acks its
progress from there (istream.py), below the stream's earlier acks. A window that ACKs came for
without moving it for `retransmit_wait_ns` starts again empty: another consumer of the tree holds
the root's ack point below the answer, and its ACKs say nothing of it (the answer then goes on a
window per wait, never stalls); one that no ACK came for in ten times that starts again too (the
root may be gone). No read goes while the peer link to the root it answers is congested (past its
send buffer's high-water mark: what it is sent waits in the link's bounded queue, and past it is
dropped); it goes when the link drains. A nack's first range is read at once (the root's acks cannot move before it is
answered), and what was sent past its start no longer counts as in flight (it was lost, or it
waits at the root behind that range). A nack of ticks a read of the tree is already
answering asks only for what that read has sent so far (it may have been lost): the rest is on its
way, and is not read twice.

A tree that gets members again after a while without (its rendez-vous point says TREE_ACTIVE to
the publishers it told it was empty, or whose streams it had) is told at once that every tick
after the last event this pubend published on it is silence (`activated`): the brokers that
joined it wanting history (`--from`, a durable token) then see a gap before that point, nack it,
and get the history from the log, instead of never hearing of a pubend that stays idle.

After a restart the pubend does not know which trees it had sent on; it reads the log's recent
tail (`recovery_ns`) once, and treats every tree found there as active and unacknowledged, so
periodic silence makes any broker that lacks the last events before the crash nack them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tidings.core import defaults
from tidings.core.effects import ReadLog
from tidings.core.event import TICK_MAX, own_record_prefix, record_channel_bytes, record_routing_fields
from tidings.core.inputs import LogState
from tidings.core.reliability.messages import RECORDS_PER_MESSAGE_MAX as RECORDS_MAX
from tidings.core.reliability.messages import KnowledgeMessage
from tidings.core.units import MICROSECOND_NS

STALLED_WAITS = 10  # a window no ack came for this many retransmit_wait_ns starts again


@dataclass(frozen=True, slots=True)
class SourceConfig:
    silence_interval_ns: int
    stream_idle_ns: int
    recovery_ns: int
    read_bytes_max: int
    reads_max: int  # log reads in flight answering nacks
    trees_max: int
    knowledge_bytes_max: int  # record bytes in one knowledge message
    release_hold_ns: int = defaults.RELEASE_HOLD_NS  # a new root's release point is trusted after this long
    retransmit_window_bytes: int = defaults.RETRANSMIT_WINDOW_BYTES  # a tree's nack answers sent beyond its root's ack
    # a window its root's acks have not moved this long starts again
    retransmit_wait_ns: int = defaults.RETRANSMIT_WAIT_NS


@dataclass(frozen=True, slots=True)
class PublishOnTree:
    """Send `event` (the originating broker's address and a knowledge message) to `tree`'s root:
    straight to `root` when the pubend knows it, else routed towards the tree's key."""

    tree: str
    event: list[Any]
    root: str | None = None
    # sent even if the root said the tree is empty: someone below asked for it (a retransmission)
    # or has not acknowledged what it had (a root that said "empty" may be a stale one of a
    # partition, or have lost its members since)
    past_empty: bool = False


@dataclass(slots=True)
class _TreeStream:
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


@dataclass(slots=True)
class _Read:
    tree: str | None  # None: the recovery read of the log's tail
    after: int
    through: int
    asker: str | None = None  # the root whose nack it answers: the answer goes straight to it
    parked: bool = False  # waiting for the tree's window (no ReadLog out)


@dataclass(slots=True)
class _Window:
    """A tree's nack answers in flight: (last tick, record bytes) of each answer its root has not
    acknowledged yet, oldest first, the reads out, and when the root last acknowledged more."""

    acked: int
    acked_ns: int
    sent: list[tuple[int, int]]
    bytes: int = 0
    reading: int = 0  # reads of the tree out (each may return read_bytes_max)
    held_ns: int | None = None  # when an ack came that did not move the window, since it last moved

    def ack(self, now: int, through: int) -> None:
        if through <= self.acked:  # (the root's acks are its ack point: lower while a catchup is below it)
            if self.held_ns is None:
                self.held_ns = now
            return
        self.acked, self.acked_ns, self.held_ns = through, now, None
        done = 0
        for tick, size in self.sent:
            if tick > through:
                break
            done += 1
            self.bytes -= size
        del self.sent[:done]

    def lost_after(self, tick: int) -> None:
        """The root nacked from `tick`: what was sent past it is not in flight any more."""
        kept = [(t, size) for t, size in self.sent if t <= tick]
        self.sent, self.bytes = kept, sum(size for _, size in kept)


SourceEffect = PublishOnTree | ReadLog


class Source:
    """The pubend `pubend_id` at `address`; `trees_of(channel)` names the trees of a channel, and
    `empty(now, tree)` says whether the tree's root said it has no members (Scribe's TREE_EMPTY)."""

    def __init__(self, pubend_id: str, address: str, config: SourceConfig, trees_of: Callable[[str], list[str]],
                 empty: Callable[[int, str], bool] = lambda now, tree: False,
                 congested: Callable[[str], bool] = lambda address: False) -> None:
        self.pubend_id = pubend_id
        self._congested = congested  # the peer link to this root is past its high-water mark
        self.address = address
        self.config = config
        self._trees_of = trees_of
        self._empty = empty
        self._streams: dict[str, _TreeStream] = {}
        self._record_prefix = own_record_prefix(pubend_id)  # [pubend, ... of each own record
        self._reads: dict[int, _Read] = {}
        self._windows: dict[str, _Window] = {}  # trees with reads (at most reads_max)
        self._next_reader = 0
        self.nacks_received = 0
        self.ticks_retransmitted = 0  # events of the tree sent again in nack answers
        self.records_read = 0  # records read back from the log to answer nacks
        self.reads_parked = 0  # reads that waited for the retransmission window
        self.windows_restarted = 0  # windows the root's acks had not moved for retransmit_wait_ns
        self.nack_ticks_in_flight = 0  # nacked ticks not read again: a read was answering them
        self.refused_from: int | None = None  # the first tick of a tree refused for trees_max
        self._last_data: dict[str, int] = {}  # tree -> its last event's tick, most recent trees last
        # records up to here may be on any tree: logged before this run (`recover`), or of a tree
        # whose `_last_data` entry was evicted; past it, a tree's records end at its entry
        self._untracked_through = TICK_MAX

    # ---- first-time knowledge ------------------------------------------------------------------

    def published(self, now: int, deliveries: Sequence[tuple[int, str, Any, bytes]], synced: int) -> list[SourceEffect]:
        """The sync made every tick up to `synced` durable; `deliveries` are its events (tick,
        channel, attributes, record), each for the trees of its channel."""
        out: list[SourceEffect] = []
        for tree, records in self._by_tree(deliveries).items():
            quiet = self._quiet_after(tree)
            self._last_data.pop(tree, None)
            self._last_data[tree] = records[-1][0]
            if len(self._last_data) > self.config.trees_max:
                oldest = next(iter(self._last_data))
                self._untracked_through = max(self._untracked_through, self._last_data.pop(oldest))
            stream = self._streams.get(tree)
            owed = stream is not None and stream.acked_through < stream.sent_through
            if self._empty(now, tree) and not owed:  # no members: nobody to tell; a member that
                if stream is not None:  # joins later nacks what it wants from its start
                    stream.sent_through = synced
                continue
            if stream is None:  # its first message says the ticks since the tree's previous event are silence,
                # so a subscriber that starts a clock-skew allowance back need not nack them
                stream = self._new_stream(tree, min(quiet, records[0][0] - 1), now)
                if stream is None:
                    continue
            out += self._send_chunked(tree, stream.sent_through, synced, records, retransmit=False,
                                      root=stream.root, past_empty=owed)
            stream.sent_through = synced
            stream.data_ns = now
        return out

    def _by_tree(self, deliveries: Sequence[tuple[int, str, Any, bytes]]) -> dict[str, list[tuple[int, bytes]]]:
        """Each tree's events; a run of events on one channel is looked up once."""
        by_tree: dict[str, list[tuple[int, bytes]]] = {}
        run: list[tuple[int, bytes]] = []
        run_channel = ""  # no channel is empty
        for tick, channel, _, record in deliveries:
            if channel != run_channel:
                self._extend(by_tree, run_channel, run)
                run, run_channel = [], channel
            run.append((tick, record))
        self._extend(by_tree, run_channel, run)
        return by_tree

    def _extend(self, by_tree: dict[str, list[tuple[int, bytes]]], channel: str, run: list[tuple[int, bytes]]) -> None:
        if not run:
            return
        for tree in self._trees_of(channel):
            if tree in by_tree:
                by_tree[tree] += run
            else:
                by_tree[tree] = run.copy()

    def _send_chunked(self, tree: str, after: int, through: int, records: list[tuple[int, bytes]],
                      retransmit: bool, root: str | None = None, past_empty: bool = False) -> list[SourceEffect]:
        """Knowledge of (after, through] in messages of at most `knowledge_bytes_max` of records
        (and RECORDS_MAX records); each message's range ends at its last record but the last's."""
        out: list[SourceEffect] = []
        start = 0
        size = 0
        for i, (_, record) in enumerate(records):
            if i > start and (size + len(record) > self.config.knowledge_bytes_max or i - start >= RECORDS_MAX):
                last = records[i - 1][0]
                out.append(self._send(tree, after, last, records[start:i], retransmit, root, past_empty))
                after, start, size = last, i, 0
            size += len(record)
        out.append(self._send(tree, after, through, records[start:], retransmit, root, past_empty))
        return out

    def _new_stream(self, tree: str, sent_through: int, now: int) -> _TreeStream | None:
        if len(self._streams) >= self.config.trees_max:  # the limit: knowledge for this tree reaches
            if self.refused_from is None:                # brokers when they nack it, and nobody
                self.refused_from = sent_through         # reports its release: hold it from here
            return None
        stream = self._streams[tree] = _TreeStream(sent_through, sent_through, now, released_through=sent_through,
                                                   delivered_through=sent_through)
        return stream

    def _quiet_after(self, tree: str) -> int:
        """The tick after which the log holds no record of `tree` (up to what was synced)."""
        return max(self._last_data.get(tree, 0), self._untracked_through)

    def activated(self, tree: str, synced: int) -> list[SourceEffect]:
        """`tree` has members again: every tick after this pubend's last event on it is silence."""
        last = self._last_data.get(tree)
        if last is None or synced <= last:
            return []
        return [self._send(tree, last, synced, [], retransmit=True)]

    def silence(self, now: int, synced: int) -> list[SourceEffect]:
        """Periodic silence up to `synced` on each tree with recent data or unacknowledged ticks;
        forgets idle, fully acknowledged trees."""
        out: list[SourceEffect] = []
        for tree, window in self._windows.items():  # (the acks may have stopped altogether)
            out += self._resume(now, tree, window)
        idle = self.config.stream_idle_ns
        for tree, stream in list(self._streams.items()):
            recent = now - stream.data_ns < idle
            if not recent and stream.acked_through >= stream.sent_through <= stream.released_through:
                del self._streams[tree]
                continue
            if synced > stream.sent_through:
                owed = stream.acked_through < stream.sent_through
                out.append(self._send(tree, stream.sent_through, synced, [], retransmit=False, past_empty=owed))
                stream.sent_through = synced
        return out

    def acked(self, now: int, tree: str, through: int, root: str, released: int,
              delivered: int) -> list[SourceEffect]:
        """The rendez-vous point at `root` acknowledged the tree's stream through `through`; every
        durable subscription on the tree released it through `released`, and every subscriber that
        keeps up has it through `delivered`. Returns the reads the ack lets go on (the window)."""
        window = self._windows.get(tree)
        out: list[SourceEffect] = []
        if window is not None:
            window.ack(now, through)
            out += self._resume(now, tree, window)
        stream = self._streams.get(tree)
        if stream is None:
            return out
        if stream.root is not None and root != stream.root:  # a new root: hold while the brokers below find it
            stream.hold_at, stream.hold_delivered = stream.released_through, stream.delivered_through
            stream.hold_until = now + self.config.release_hold_ns
        stream.root = root
        if through > stream.acked_through:
            stream.acked_through = min(through, stream.sent_through)
        stream.released_through = min(released, stream.sent_through)
        stream.delivered_through = min(delivered, stream.sent_through)
        if now < stream.hold_until:
            stream.released_through = min(stream.released_through, stream.hold_at)
            stream.delivered_through = min(stream.delivered_through, stream.hold_delivered)
        return out

    def released(self, now: int, held: int | None) -> int:
        """Tr: the tick through which every durable subscription released this pubend's stream, on
        every tree with members (`held`: this broker's own durable subscriptions', None if it hosts
        none); TICK_MAX when nothing holds it."""
        points = [p for p in (held, self.refused_from) if p is not None]
        points += [stream.released_through for stream in self._counted(now)]
        return min(points, default=TICK_MAX)

    def _counted(self, now: int) -> list[_TreeStream]:
        """The streams whose trees count for release: those with members, and for
        `release_hold_ns` those that lost them (a tree whose only subscriber broker failed looks
        empty too)."""
        out = []
        for tree, stream in self._streams.items():
            if not self._empty(now, tree):
                stream.empty_since = None
            elif stream.empty_since is None:
                stream.empty_since = now
            if stream.empty_since is None or now - stream.empty_since < self.config.release_hold_ns:
                out.append(stream)
        return out

    def held_trees(self) -> dict[str, int]:
        """The trees whose durable subscriptions have not released all that was sent, with their
        release points: saved with the broker's durable state, since after a restart the pubend
        would not otherwise know of a tree that has been quiet since (`restore`)."""
        return {tree: s.released_through for tree, s in self._streams.items()
                if s.released_through < s.sent_through}

    def restore(self, now: int, held: dict[str, int], last_tick: int) -> None:
        """At start: the trees `held_trees` saved become streams again, holding release where they
        did, with silence after the log's last tick until their roots acknowledge (a broker below
        that lacks earlier ticks nacks them)."""
        for tree, released in held.items():
            stream = self._new_stream(tree, last_tick, now)
            if stream is not None:  # (the root then may not have heard from below yet: hold)
                stream.acked_through = stream.delivered_through = stream.hold_delivered = 0
                stream.released_through = stream.hold_at = min(released, last_tick)
                stream.hold_until = now + self.config.release_hold_ns

    def delivered(self, now: int) -> int:
        """Td: the tick through which the subscribers of every tree with members have the stream
        (TICK_MAX: no such tree)."""
        return min((s.delivered_through for s in self._counted(now)), default=TICK_MAX)

    def unacknowledged(self, now: int) -> int:
        """Trees with members whose root has not yet acknowledged all the knowledge sent on them:
        a draining broker waits for none to be left, or its events would wait for its restart."""
        return sum(1 for tree, s in self._streams.items()
                   if s.acked_through < s.sent_through and not self._empty(now, tree))

    def root_moved(self, tree: str, address: str) -> None:
        stream = self._streams.get(tree)
        if stream is not None and stream.root == address:
            stream.root = None

    @property
    def active_trees(self) -> int:
        return len(self._streams)

    # ---- nacks and the log ---------------------------------------------------------------------

    def nacked(self, now: int, tree: str, ranges: Sequence[tuple[int, int]], synced: int, log: LogState,
               asker: str | None = None) -> list[SourceEffect]:
        """Read the nacked ranges back (clamped to the durable tail). What the log released is
        answered at once as lost, and the ticks between that and its first record as silence,
        each in one message however far it reaches past the range asked (a read from tick 0 is
        answered in one round trip, not one per nack range). When `asker`, the root that nacked,
        is the root this pubend knows for the tree (its ACKs said so), the answers go straight to
        it: routed, they would reach whichever broker the overlay's routing takes for the root,
        which after a partition or a restart need not be the one asking, and it would ask for
        ever. Otherwise (a root that has moved on) they are routed, to the root there is now.
        Ticks a read of the tree is answering are not read again, but those it has already sent
        are (they may be what was lost); what was sent past the first tick asked for no longer
        counts as in flight in the tree's window."""
        self.nacks_received += 1
        stream = self._streams.get(tree)
        asker = asker if stream is not None and stream.root == asker else None
        out: list[SourceEffect] = []
        window = self._windows.get(tree)
        if window is not None and ranges:
            window.lost_after(ranges[0][0])
            out += self._resume(now, tree, window)
        empty_through = synced if log.first_tick is None else min(synced, log.first_tick - 1)  # no record up to here
        done = 0  # answered through here already (the ranges are sorted)
        first = True  # no read made for this nack yet
        for asked_after, asked in ranges:
            through = min(asked, synced)
            after = max(asked_after, done)
            if through <= after:
                continue
            if after < log.released_through:
                lost = min(log.released_through, synced)
                out.append(self._send(tree, after, lost, [], retransmit=True, root=asker, lost=True))
                after = done = lost
            if after < empty_through:
                out.append(self._send(tree, after, empty_through, [], retransmit=True, root=asker))
                after = done = empty_through
            if through <= after:
                continue
            quiet = self._quiet_after(tree)
            if quiet < through:  # answered now, without reading the log (a new subscriber's skew allowance)
                out.append(self._send(tree, max(after, quiet), through, [], retransmit=True, root=asker))
                through = quiet
                if through <= after:
                    continue
            for lo, hi in self._not_in_flight(tree, max(after, 0), through):
                if len(self._reads) >= self.config.reads_max:
                    return out  # the nack will be repeated
                # the first range nacked is where the root's horizon stands: its acks cannot move
                # before it is answered, so it never waits for them
                out += self._read(now, tree, lo, hi, asker, urgent=first)
                first = False
        return out

    def _not_in_flight(self, tree: str, after: int, through: int) -> list[tuple[int, int]]:
        """The parts of (after, through] no read of the tree still has to read (each read: from
        its position to its end); what a read has sent already is read again."""
        parts = [(after, through)]
        for r in self._reads.values():
            if r.tree != tree or r.after >= r.through:
                continue
            rest: list[tuple[int, int]] = []
            for lo, hi in parts:
                if hi <= r.after or r.through <= lo:
                    rest.append((lo, hi))
                    continue
                self.nack_ticks_in_flight += min(hi, r.through) - max(lo, r.after)
                rest += [part for part in ((lo, r.after), (r.through, hi)) if part[0] < part[1]]
            parts = rest
        return parts

    def recover(self, last_tick: int) -> list[SourceEffect]:
        """At start: read the log's recent tail to find the trees that may have undelivered events."""
        self._untracked_through = last_tick
        if last_tick <= 0:
            return []
        after = max(0, last_tick - self.config.recovery_ns // MICROSECOND_NS)
        return list(self._read(0, None, after, last_tick))

    def _read(self, now: int, tree: str | None, after: int, through: int, asker: str | None = None,
              urgent: bool = False) -> list[ReadLog]:
        """Read (after, through] of the log; for a tree's nack, once its window has room (at once
        when `urgent`)."""
        self._next_reader -= 1  # negative reader keys: the broker's subends use positive ones
        read = self._reads[self._next_reader] = _Read(tree, after, through, asker)
        if tree is not None:
            window = self._windows.get(tree)
            if window is None:
                window = self._windows[tree] = _Window(after, now, [])
            if not urgent and not self._room(window, asker):
                read.parked = True
                self.reads_parked += 1
                return []
            window.reading += 1
        return [ReadLog(self._next_reader, after, through, self.config.read_bytes_max)]

    def _room(self, window: _Window, asker: str | None) -> bool:
        """Another read of the tree may go (to `asker`, when the answer goes straight to it)."""
        if asker is not None and self._congested(asker):
            return False  # its link's queue is bounded: the answer would be dropped there, and nacked again
        return window.bytes + window.reading * self.config.read_bytes_max < self.config.retransmit_window_bytes

    def _resume(self, now: int, tree: str, window: _Window) -> list[SourceEffect]:
        """The parked reads of `tree` the window has room for now, the lowest first; a window the
        root's acks have not moved for `retransmit_wait_ns` though they came (the ack point is
        held below the answer), or that heard nothing for ten times that (the root may be gone), is
        emptied first. (A root that is only slow, its subscriber's connection full, sends no ack.)"""
        stalled = now - window.acked_ns
        wait = self.config.retransmit_wait_ns
        held = window.held_ns is not None and now - window.held_ns >= wait
        if window.sent and stalled >= wait and (held or stalled >= STALLED_WAITS * wait):
            window.sent, window.bytes, window.acked_ns, window.held_ns = [], 0, now, None
            self.windows_restarted += 1
        out: list[SourceEffect] = []
        parked = sorted((r.after, reader) for reader, r in self._reads.items() if r.parked and r.tree == tree)
        for _, reader in parked:  # the lowest first: the root's acks move only from there
            read = self._reads[reader]
            if not self._room(window, read.asker):
                break
            read.parked = False
            window.reading += 1
            out.append(ReadLog(reader, read.after, read.through, self.config.read_bytes_max))
        return out

    def _read_done(self, tree: str | None) -> None:
        """A read of `tree` ended: the tree's window goes with its last read."""
        if tree is not None and not any(r.tree == tree for r in self._reads.values()):
            self._windows.pop(tree, None)

    def owns_read(self, reader: int) -> bool:
        return reader in self._reads

    def log_read(self, now: int, reader: int, records: list[tuple[int, bytes]], log: LogState) -> list[SourceEffect]:
        read = self._reads.pop(reader)
        if read.tree is None:
            return self._recovered(now, records)
        through = records[-1][0] if records else read.through
        out: list[SourceEffect] = []
        after = read.after
        released = min(log.released_through, through)
        if released > after:  # released since the nack came: those ticks are lost, not silent
            out.append(self._send(read.tree, after, released, [], retransmit=True, root=read.asker, lost=True))
            after = released
        window = self._windows.get(read.tree)
        if window is not None:
            window.reading -= 1
        self.records_read += len(records)
        mine = [(tick, record) for tick, record in records
                if tick > after and read.tree in self.record_trees(record)]
        self.ticks_retransmitted += len(mine)
        if through > after:
            out += self._send_chunked(read.tree, after, through, mine, retransmit=True, root=read.asker)
            if mine and window is not None and through > window.acked:
                size = sum(len(record) for _, record in mine)
                window.sent.append((through, size))
                window.bytes += size
        if through < read.through:  # cut short: read on (when the window has room)
            out += self._read(now, read.tree, through, read.through, read.asker)
        else:
            self._read_done(read.tree)
        return out

    def link_drained(self, now: int) -> list[SourceEffect]:
        """A peer link took what it held: reads that waited for it may go."""
        out: list[SourceEffect] = []
        for tree, window in self._windows.items():
            out += self._resume(now, tree, window)
        return out

    def read_failed(self, reader: int) -> None:
        read = self._reads.pop(reader, None)  # the nack will be repeated
        if read is not None and read.tree is not None:
            window = self._windows.get(read.tree)
            if window is not None and not read.parked:
                window.reading -= 1
            self._read_done(read.tree)

    def _recovered(self, now: int, records: list[tuple[int, bytes]]) -> list[SourceEffect]:
        if not records:
            return []
        last = records[-1][0]
        for _, record in records:
            for tree in self.record_trees(record):
                if tree not in self._streams:
                    self._new_stream(tree, last, now)
                    stream = self._streams.get(tree)
                    if stream is not None:  # unknown: silence goes on until the root acks, and
                        stream.acked_through = stream.released_through = stream.delivered_through = 0  # and a hold
                        stream.hold_until = now + self.config.release_hold_ns
        return []

    def record_trees(self, record: bytes) -> list[str]:
        """The trees of one of this pubend's own records. A nack's answer sorts thousands of them,
        so the usual layout (a tick past 2**32, a channel under 256 bytes) is read in place: the
        channel's bytes follow a fixed prefix (`trees_of` caches the trees of a channel)."""
        raw = record_channel_bytes(record, self._record_prefix)
        if raw is not None:
            return self._trees_of(raw.decode())
        fields = record_routing_fields(record)
        return [] if fields is None else self._trees_of(fields.channel)

    def _send(self, tree: str, after: int, through: int, records: list[tuple[int, bytes]],
              retransmit: bool, root: str | None = None, past_empty: bool = False, lost: bool = False) -> PublishOnTree:
        message = KnowledgeMessage(tree, self.pubend_id, after, through, tuple(t for t, _ in records),
                                   tuple(r for _, r in records), retransmit, lost=lost)
        return PublishOnTree(tree, [self.address, message.to_wire()], root, past_empty or retransmit)

    def status(self) -> dict[str, Any]:
        return {"trees": len(self._streams), "roots_known": sum(1 for s in self._streams.values() if s.root),
                "reads": len(self._reads), "nacks_received": self.nacks_received,
                "ticks_retransmitted": self.ticks_retransmitted, "records_read": self.records_read,
                "reads_parked": self.reads_parked, "windows_restarted": self.windows_restarted,
                "nack_ticks_in_flight": self.nack_ticks_in_flight,
                "retransmit_bytes_unacked": sum(w.bytes for w in self._windows.values())}
