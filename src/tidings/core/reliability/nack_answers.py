"""The pubend's answers to nacks: ranges read back from its log, paced by each tree's window.

Theory of operation (Gryphon exactly-once §3.2). Nacks reach the pubend from a root (and, through
the root, from any broker below). Each nacked range is read back from the log (ReadLog, bounded in
bytes and in reads in flight, `reads_max`) and sent again as retransmitted knowledge of exactly
the range read: the events of that tree as D, every other tick as F. Ranges beyond what is durable
are clamped to the durable tail. Ticks the log no longer holds (released: by the release protocol
or the operator's retention caps) are answered as L, a lost range, never as silence: whoever
wanted them learns that events may be missing, and a subscriber gets an explicit gap. Ticks before
the log's first record, and past the tree's last event (source_knowledge.py `EventTails`), are
answered as silence at once, each in one message however far it reaches past the range asked.

The answer goes straight to the root that asked when it is the root the pubend knows for the tree
(the caller passes `asker` only then), else it is routed to whichever root there is now.

Pacing (retransmit_window.py): a read that would go past the tree's window waits (parked, still
counted in `reads_max`) until the root's ACKs move on. No read goes while the peer link to the root
it answers is congested (past its send buffer's high-water mark: what it is sent waits in the
link's bounded queue, and past it is dropped); it goes when the link drains. A nack's first range
is read at once (the root's acks cannot move before it is answered), and what was sent past its
start no longer counts as in flight. A nack of ticks a read of the tree is already answering asks
only for what that read has sent so far (it may have been lost): the rest is on its way, and is
not read twice. A read cut short (`read_bytes_max`) reads on from where it stopped, when the window
has room.

The recovery read of the log's tail after a restart (tree None) is one more read here; its
records go back to the source, which makes streams of the trees found.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tidings.core.effects import ReadLog
from tidings.core.inputs import LogState
from tidings.core.reliability.log_span import payload_runs
from tidings.core.reliability.retransmit_window import RetransmitWindow
from tidings.core.reliability.source_knowledge import EventTails, KnowledgeWriter, PublishOnTree

AnswerEffect = PublishOnTree | ReadLog


@dataclass(frozen=True, slots=True)
class ReadLimits:
    read_bytes_max: int
    reads_max: int  # log reads in flight answering nacks
    retransmit_window_bytes: int  # a tree's nack answers sent beyond its root's ack
    retransmit_wait_ns: int  # a window its root's acks have not moved this long starts again


@dataclass(slots=True)
class _Read:
    tree: str | None  # None: the recovery read of the log's tail
    after: int
    through: int
    asker: str | None = None  # the root whose nack it answers: the answer goes straight to it
    parked: bool = False  # waiting for the tree's window (no ReadLog out)


class NackAnswers:
    """The log reads answering nacks of the pubend's trees, and each tree's window."""

    def __init__(self, limits: ReadLimits, writer: KnowledgeWriter, tails: EventTails,
                 congested: Callable[[str], bool]) -> None:
        self._limits = limits
        self._writer = writer
        self._tails = tails
        self._congested = congested  # the peer link to this root is past its high-water mark
        self._reads: dict[int, _Read] = {}
        self._windows: dict[str, RetransmitWindow] = {}  # trees with reads (at most reads_max)
        self._next_reader = 0
        self.nacks_received = 0
        self.ticks_retransmitted = 0  # events of the tree sent again in nack answers
        self.records_read = 0  # records read back from the log to answer nacks
        self.reads_parked = 0  # reads that waited for the retransmission window
        self.windows_restarted = 0  # windows the root's acks had not moved for retransmit_wait_ns
        self.nack_ticks_in_flight = 0  # nacked ticks not read again: a read was answering them

    def nacked(self, now: int, tree: str, ranges: Sequence[tuple[int, int]], synced: int, log: LogState,
               asker: str | None) -> list[AnswerEffect]:
        """Read the nacked ranges back (clamped to the durable tail). What the log released is
        answered at once as lost, and the ticks between that and its first record as silence,
        each in one message however far it reaches past the range asked (a read from tick 0 is
        answered in one round trip, not one per nack range). `asker` is the root that nacked when
        it is the root the pubend knows for the tree: the answers go straight to it (routed, they
        would reach whichever broker the overlay's routing takes for the root, which after a
        partition or a restart need not be the one asking, and it would ask for ever); None:
        routed, to the root there is now. Ticks a read of the tree is answering are not read
        again, but those it has already sent are (they may be what was lost); what was sent past
        the first tick asked for no longer counts as in flight in the tree's window."""
        self.nacks_received += 1
        send = self._writer.send
        out: list[AnswerEffect] = []
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
                out.append(send(tree, after, lost, [], retransmit=True, root=asker, lost=True))
                after = done = lost
            if after < empty_through:
                out.append(send(tree, after, empty_through, [], retransmit=True, root=asker))
                after = done = empty_through
            if through <= after:
                continue
            quiet = self._tails.quiet_after(tree)
            if quiet < through:  # answered now, without reading the log (a new subscriber's skew allowance)
                out.append(send(tree, max(after, quiet), through, [], retransmit=True, root=asker))
                through = quiet
                if through <= after:
                    continue
            for lo, hi in self._not_in_flight(tree, max(after, 0), through):
                if len(self._reads) >= self._limits.reads_max:
                    return out  # the nack will be repeated
                # the first range nacked is where the root's horizon stands: its acks cannot move
                # before it is answered, so it never waits for them
                out += self.read(now, tree, lo, hi, asker, urgent=first)
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

    def read(self, now: int, tree: str | None, after: int, through: int, asker: str | None = None,
             urgent: bool = False) -> list[ReadLog]:
        """Read (after, through] of the log (`tree` None: the recovery read); for a tree's nack,
        once its window has room (at once when `urgent`)."""
        read = self._reads[self.reader_id()] = _Read(tree, after, through, asker)
        if tree is not None:
            window = self._windows.get(tree)
            if window is None:
                window = self._windows[tree] = RetransmitWindow(after, now, [])
            if not urgent and not self._room(window, asker):
                read.parked = True
                self.reads_parked += 1
                return []
            window.reading += 1
        return [ReadLog(self._next_reader, after, through, self._limits.read_bytes_max, span=tree is not None)]

    def reader_id(self) -> int:
        """A new key for a read of the pubend's (negative: the broker's subends use positive ones)."""
        self._next_reader -= 1
        return self._next_reader

    def _room(self, window: RetransmitWindow, asker: str | None) -> bool:
        """Another read of the tree may go (to `asker`, when the answer goes straight to it)."""
        if asker is not None and self._congested(asker):
            return False  # its link's queue is bounded: the answer would be dropped there, and nacked again
        return window.room(self._limits.read_bytes_max, self._limits.retransmit_window_bytes)

    def _resume(self, now: int, tree: str, window: RetransmitWindow) -> list[AnswerEffect]:
        """The parked reads of `tree` the window has room for now, the lowest first; a stalled
        window is emptied first (retransmit_window.py)."""
        if window.restart_if_stalled(now, self._limits.retransmit_wait_ns):
            self.windows_restarted += 1
        out: list[AnswerEffect] = []
        parked = sorted((r.after, reader) for reader, r in self._reads.items() if r.parked and r.tree == tree)
        for _, reader in parked:  # the lowest first: the root's acks move only from there
            read = self._reads[reader]
            if not self._room(window, read.asker):
                break
            read.parked = False
            window.reading += 1
            out.append(ReadLog(reader, read.after, read.through, self._limits.read_bytes_max, span=True))
        return out

    def resume_all(self, now: int) -> list[AnswerEffect]:
        """Every tree's parked reads that may go now (a link drained; the acks may have stopped)."""
        out: list[AnswerEffect] = []
        for tree, window in self._windows.items():
            out += self._resume(now, tree, window)
        return out

    def acked(self, now: int, tree: str, through: int) -> list[AnswerEffect]:
        """The tree's root acknowledged its stream through `through`: the reads that lets go on."""
        window = self._windows.get(tree)
        if window is None:
            return []
        window.ack(now, through)
        return self._resume(now, tree, window)

    def _read_done(self, tree: str | None) -> None:
        """A read of `tree` ended: the tree's window goes with its last read."""
        if tree is not None and not any(r.tree == tree for r in self._reads.values()):
            self._windows.pop(tree, None)

    def owns_read(self, reader: int) -> bool:
        return reader in self._reads

    def take_recovery(self, reader: int) -> bool:
        """Whether `reader` is the recovery read (which then ends here)."""
        if self._reads[reader].tree is not None:
            return False
        del self._reads[reader]
        return True

    def log_read(self, now: int, reader: int, records: list[tuple[int, bytes]], log: LogState,
                 span: tuple[int, bytes] | None = None) -> list[AnswerEffect]:
        """The log answered a nack's read: its tree's events in it, as retransmitted knowledge.
        The answer is the records, or (what a tree's read asks for) a span of the log's bytes
        holding every record up to `span[0]`, sorted onto the tree a run at a time (log_span.py);
        either way the same ticks and payloads go out, in the same messages. SpanError (a span
        that does not hold valid records) leaves this machine as the read stood: the caller fails
        the read (`read_failed`), as a read of a corrupt segment fails."""
        read = self._reads[reader]
        tree = read.tree
        assert tree is not None  # (the recovery read: take_recovery)
        if span is not None:
            through, raw = span
            runs = payload_runs(raw, read.after, through)  # (SpanError: before anything moved)
            ticks, bodies = self._writer.span_events(tree, raw, runs)
            self.records_read += sum(len(offsets) - 1 for _, offsets in runs)
        else:
            through = records[-1][0] if records else read.through
        del self._reads[reader]
        out: list[AnswerEffect] = []
        after = read.after
        released = min(log.released_through, through)
        if released > after:  # released since the nack came: those ticks are lost, not silent
            out.append(self._writer.send(tree, after, released, [], retransmit=True, root=read.asker, lost=True))
            after = released
        window = self._windows.get(tree)
        if window is not None:
            window.reading -= 1
        if span is None:
            self.records_read += len(records)
            mine = [(tick, record) for tick, record in records
                    if tick > after and tree in self._writer.record_trees(record)]
            ticks, bodies = [tick for tick, _ in mine], [record for _, record in mine]
        elif ticks and ticks[0] <= after:  # (released meanwhile: rare)
            keep = next(i for i, tick in enumerate(ticks) if tick > after) if ticks[-1] > after else len(ticks)
            ticks, bodies = ticks[keep:], bodies[keep:]
        self.ticks_retransmitted += len(ticks)
        if through > after:
            out += self._writer.chunked_columns(tree, after, through, ticks, bodies, retransmit=True, root=read.asker)
            if ticks and window is not None:
                window.answered(through, sum(map(len, bodies)))
        if through < read.through:  # cut short: read on (when the window has room)
            out += self.read(now, tree, through, read.through, read.asker)
        else:
            self._read_done(tree)
        return out

    def read_failed(self, reader: int) -> None:
        read = self._reads.pop(reader, None)  # the nack will be repeated
        if read is not None and read.tree is not None:
            window = self._windows.get(read.tree)
            if window is not None and not read.parked:
                window.reading -= 1
            self._read_done(read.tree)

    def status(self) -> dict[str, Any]:
        return {"reads": len(self._reads), "nacks_received": self.nacks_received,
                "ticks_retransmitted": self.ticks_retransmitted, "records_read": self.records_read,
                "reads_parked": self.reads_parked, "windows_restarted": self.windows_restarted,
                "nack_ticks_in_flight": self.nack_ticks_in_flight,
                "retransmit_bytes_unacked": sum(w.bytes for w in self._windows.values())}
