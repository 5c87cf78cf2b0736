"""Flow control of a pubend's first-time knowledge: per tree, a window of credit its root's ACKs open.

Theory of operation. Without it a fast publisher overruns a slow subscriber's broker: the pubend
sends each sync's knowledge to the tree's rendez-vous point at once, the root's link to the slow
broker blocks, the root's stream cache (`stream_cache_bytes_max`) and the peer links' queues
(`peer_queue_bytes_max`) fill, and what they then drop comes back as nacks that the pubend answers
by reading its log (measured on gd_bench, the publisher 1,000,000 events ahead and the subscribers'
broker stopped 300 ms a second: 61 knowledge messages dropped on the pubend's link to the root, 57
nacks of 4.25M ticks, 972,700 ticks read back and sent again, and the subscribers not done at their
time limit; docs/benchmarks.md "Flow control across links").

The root acknowledges a tree's stream only through what every consumer below it has (istream.py),
so its ACK is end to end. A tree's `FlowWindow` keeps the first-time messages sent but not yet
acknowledged (their last tick and record bytes), and lets a new one go only while fewer than
`window_bytes` of records are in flight: at most the window plus one message is beyond the root's
ACK, which the root's cache and the links' queues hold without dropping anything. A message the
window has no room for is *held* here, in order, behind those held before it; the root's ACKs
release them as they make room. Holding is always sound: the pubend's log has every held event,
knowledge is soft state, and a held range is simply not known downstream yet. Nothing overtakes a
held message (no later message, and no periodic silence: the source sends none past a held
message), so the root never sees the held range as a gap to nack.

Three limits keep a stuck receiver from costing more than a slow one (the third is the streams':
a subscription whose connection is blocked and which is more than `stall_ns` of ticks behind its
stream no longer holds the ACK its broker sends up, istream.py `flow_point`, so one slow subscriber
client holds its tree back by at most that much):

- `stall_ns`: a window whose root's ACKs have not moved for this long while it holds (a broker
  below is stopped, or a link is down) goes STALLED: what it holds and whatever comes next is sent
  at once, as without flow control, so a stuck subscriber's broker does not stop the tree's other
  subscribers; whatever is lost below is nacked and answered from the log as before. The first ACK
  that moves brings pacing back.
- `hold_bytes_max`: past it, the newest held messages are not kept in memory: their range is
  *spilled* (`spill`, counted in `spills`), and so is every later message of the tree while a spill
  is owed. The pubend's log has all of it: once the messages held before it have gone, the range
  is read back (`reading`), a window's worth at a time whenever the window has room (`ReadBack`;
  the source reads the log, at most `window_bytes`, and sends the tree's records of it as
  first-time knowledge, counted in flight here), and nothing later goes until all of it was read
  (`read_done`). So a publisher that outruns its tree for long costs bounded memory, and its
  backlog waits in the log it is in anyway, sent at the pace the tree's ACKs allow, instead of
  being dropped on the way and nacked.

States (`FlowState`, moves in `TRANSITIONS`): OPEN (nothing held) -> HELD (the window is full and
a message waits, or a range is spilled or being read back) -> OPEN (ACKs made room for everything)
or -> STALLED (no ACK moved for `stall_ns`) -> OPEN, or -> HELD while a read-back is still out
(an ACK moved). The stall deadline is one timer per held tree, in the one deadline structure
(`Deadlines`, under the broker's alarm).

Invariants: `held_bytes` is the sum of the held messages' record bytes and at most
`hold_bytes_max` after any call; in order, the range being read back comes before the held
messages, which come before the spilled range; an OPEN window holds, spills and reads nothing; a
STALLED one holds messages only behind a read-back still out; a HELD window has a stall timer and
holds, spills or reads something;
`in_flight_bytes` is the sum over `in_flight`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple

from tidings.core import defaults
from tidings.core.deadlines import Alarm, Deadlines
from tidings.core.reliability.source_knowledge import PublishOnTree
from tidings.core.states import Transitions


class FlowState(StrEnum):
    OPEN = "open"  # nothing held: a message goes when the window has room
    HELD = "held"  # the window is full: messages wait here, in order, for the root's ACKs
    STALLED = "stalled"  # the root's ACKs stopped while holding: everything goes, as without flow control


OPEN, HELD, STALLED = FlowState
TRANSITIONS = Transitions[FlowState]("flow window", {
    OPEN: frozenset({HELD}),
    HELD: frozenset({OPEN, STALLED}),
    STALLED: frozenset({OPEN, HELD}),  # HELD: an ACK moved while a read-back is still out
})


@dataclass(frozen=True, slots=True)
class FlowLimits:
    # record bytes of first-time knowledge in flight beyond the root's ACK; 0: no flow control
    window_bytes: int = defaults.FLOW_WINDOW_BYTES
    # record bytes held while the window is full; past it the oldest go anyway
    hold_bytes_max: int = defaults.FLOW_HOLD_BYTES_MAX
    stall_ns: int = defaults.FLOW_STALL_NS  # a window whose root's ACKs do not move this long while holding sends all


DEFAULT_LIMITS = FlowLimits()


class FlowStall(NamedTuple):
    """The root of `tree` has not acknowledged anything for `stall_ns` while its window holds."""

    tree: str


@dataclass(frozen=True, slots=True)
class ReadBack:
    """Read `tree`'s first-time knowledge of (after, through] back from the pubend's log and send
    it (then `FlowWindows.read_done`): the window spilled it, past `hold_bytes_max`."""

    tree: str
    after: int
    through: int


FlowOutput = PublishOnTree | ReadBack


def record_bytes(message: PublishOnTree) -> int:
    known = message.records_bytes  # (counted by the writer: source_knowledge.py `chunked_columns`)
    return sum(map(len, message.message.records)) if known is None else known


class FlowWindow:
    """One tree's window: messages in flight (last tick, record bytes), messages held, the range
    spilled to the log and the range being read back."""

    __slots__ = ("acked", "held", "held_bytes", "in_flight", "in_flight_bytes", "read_out", "reading", "spill",
                 "state")

    def __init__(self) -> None:
        self.state = OPEN
        self.acked = -1  # the root's ACK, as far as it moved
        self.in_flight: deque[tuple[int, int]] = deque()
        self.in_flight_bytes = 0
        self.held: deque[PublishOnTree] = deque()
        self.held_bytes = 0
        self.spill: tuple[int, int] | None = None  # (after, through] owed from the log, after the held
        self.reading: tuple[int, int] | None = None  # (after, through] left to read back, before the held
        self.read_out = False  # a read of `reading` is out (one at a time, each at most a window's worth)

    def move(self, state: FlowState) -> None:
        self.state = TRANSITIONS.move(self.state, state)

    @property
    def pending(self) -> bool:
        """Something waits: held, spilled or being read back."""
        return bool(self.held) or self.spill is not None or self.reading is not None

    def sent(self, message: PublishOnTree) -> PublishOnTree:
        size = record_bytes(message)
        if size:
            self.in_flight.append((message.message.through, size))
            self.in_flight_bytes += size
        return message

    def room(self, window_bytes: int) -> bool:
        return self.in_flight_bytes < window_bytes

    def hold(self, message: PublishOnTree) -> None:
        if self.spill is not None:  # behind a spill: owed from the log too
            self.spill = (self.spill[0], message.message.through)
            return
        self.held.append(message)
        self.held_bytes += record_bytes(message)

    def spill_newest(self) -> None:
        """The newest held message is not kept: its range joins the spill (which follows it)."""
        message = self.held.pop()
        self.held_bytes -= record_bytes(message)
        through = message.message.through if self.spill is None else self.spill[1]
        self.spill = (message.message.after, through)

    def unhold(self) -> PublishOnTree:
        message = self.held.popleft()
        self.held_bytes -= record_bytes(message)
        return self.sent(message)

    def ack(self, through: int) -> bool:
        """The root acknowledged through `through`; True when that moved the window."""
        if through <= self.acked:
            return False
        self.acked = through
        flight = self.in_flight
        while flight and flight[0][0] <= through:
            self.in_flight_bytes -= flight.popleft()[1]
        return True


class FlowWindows:
    """The pubend's windows, one per tree it sends first-time knowledge on."""

    def __init__(self, limits: FlowLimits, alarm: Alarm | None = None) -> None:
        self.limits = limits
        self._windows: dict[str, FlowWindow] = {}
        self.timers: Deadlines[FlowStall] = Deadlines(alarm)
        self.holds = 0  # times a window filled and held knowledge back
        self.held_messages = 0  # first-time messages that waited for the root's ACKs
        self.stalls = 0  # windows whose root's ACKs stopped for stall_ns while they held
        self.spills = 0  # held messages not kept in memory past hold_bytes_max (read back from the log)
        self.read_backs = 0  # spilled ranges read back from the log

    def window(self, tree: str) -> FlowWindow | None:
        return self._windows.get(tree)

    def holding(self, tree: str) -> bool:
        """Knowledge of `tree` waits for its root's ACKs: nothing later may go before it."""
        window = self._windows.get(tree)
        return window is not None and window.state == HELD

    @property
    def held_bytes(self) -> int:
        return sum(w.held_bytes for w in self._windows.values())

    def offer(self, now: int, tree: str, messages: list[PublishOnTree]) -> list[FlowOutput]:
        """First-time knowledge of `tree`, in order: what may go now; the rest is held (or spilled)."""
        limits = self.limits
        if not limits.window_bytes:
            return list(messages)
        window = self._windows.get(tree)
        if window is None:
            window = self._windows[tree] = FlowWindow()
        out: list[FlowOutput] = []
        for message in messages:
            if window.state == OPEN and window.room(limits.window_bytes):
                out.append(window.sent(message))
                continue
            if window.state == STALLED and not window.pending:  # unpaced, but behind a read-back still out
                out.append(window.sent(message))
                continue
            if window.state == OPEN:
                window.move(HELD)
                self.holds += 1
                self.timers.set(FlowStall(tree), now + limits.stall_ns)
            if window.spill is not None:
                self.spills += 1  # (behind a spill: owed from the log too)
            window.hold(message)
            self.held_messages += 1
        while window.held_bytes > limits.hold_bytes_max:
            window.spill_newest()
            self.spills += 1
        return out

    def acked(self, now: int, tree: str, through: int) -> list[FlowOutput]:
        """The root of `tree` acknowledged through `through`: what there is room for now."""
        window = self._windows.get(tree)
        if window is None or not window.ack(through):
            return []
        if window.state == STALLED:  # the root hears again: pace from here
            if window.pending:  # (a read-back still out)
                window.move(HELD)
                self.timers.set(FlowStall(tree), now + self.limits.stall_ns)
            else:
                window.move(OPEN)
            return []
        if window.state != HELD:
            return []
        return self._release(now, tree, window)

    def read_done(self, now: int, tree: str, through: int) -> list[FlowOutput]:
        """The read `tree`'s window asked for (ReadBack) was read and sent through `through`
        (a read stops at its byte bound: the rest is read when the window has room again)."""
        window = self._windows.get(tree)
        if window is None or window.reading is None or not window.read_out:
            return []
        window.read_out = False
        window.reading = None if through >= window.reading[1] else (max(through, window.reading[0]), window.reading[1])
        if window.state == STALLED:
            return self._release(now, tree, window, paced=False)
        return self._release(now, tree, window)

    def read_failed(self, now: int, tree: str) -> None:
        """The read-back failed: its range is asked for again at the next ACK or stall."""
        window = self._windows.get(tree)
        if window is None or not window.read_out:
            return
        window.read_out = False
        if window.state == STALLED:
            window.move(HELD)
        self.timers.set(FlowStall(tree), now + self.limits.stall_ns)

    def _release(self, now: int, tree: str, window: FlowWindow, paced: bool = True) -> list[FlowOutput]:
        """What may go now, in order: the held messages, then a read-back of the spill; none while
        a read-back is out (its answer comes first)."""
        window_bytes = self.limits.window_bytes
        out: list[FlowOutput] = []
        if window.reading is None:
            while window.held and (not paced or window.room(window_bytes)):
                out.append(window.unhold())
            if not window.held and window.spill is not None:
                window.reading, window.spill = window.spill, None
                self.read_backs += 1
        if window.reading is not None and not window.read_out and (not paced or window.room(window_bytes)):
            window.read_out = True
            out.append(ReadBack(tree, *window.reading))
        if window.state == HELD:
            if window.pending:
                self.timers.set(FlowStall(tree), now + self.limits.stall_ns)
            else:
                window.move(OPEN)
                self.timers.cancel(FlowStall(tree))
        return out

    def sent_back(self, tree: str, messages: list[PublishOnTree]) -> list[PublishOnTree]:
        """Messages of a read-back: sent now, in flight like any other."""
        window = self._windows.get(tree)
        if window is not None:
            for message in messages:
                window.sent(message)
        return messages

    def drop(self, tree: str) -> None:
        """The pubend drops or forgets `tree`'s stream: nobody below needs it (its root said it has
        no members) or it is idle and acknowledged. What it held is dropped with it: a member that
        joins later nacks what it wants from its start, answered from the log."""
        self._windows.pop(tree, None)
        self.timers.cancel(FlowStall(tree))

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def handle_timeout(self, now: int) -> list[FlowOutput]:
        """Windows whose root's ACKs stopped for `stall_ns` while holding: everything they hold
        goes, and what they spilled is read back at once."""
        out: list[FlowOutput] = []
        for key in self.timers.pop_due(now):
            window = self._windows.get(key.tree)
            if window is None or window.state != HELD:
                continue
            window.move(STALLED)
            self.stalls += 1
            out += self._release(now, key.tree, window, paced=False)
        return out

    def status(self) -> dict[str, Any]:
        return {"flow_holds": self.holds, "flow_held_messages": self.held_messages, "flow_stalls": self.stalls,
                "flow_spills": self.spills, "flow_read_backs": self.read_backs, "flow_held_bytes": self.held_bytes,
                "flow_windows_held": sum(1 for w in self._windows.values() if w.state == HELD)}


__all__ = ["DEFAULT_LIMITS", "TRANSITIONS", "FlowLimits", "FlowOutput", "FlowStall", "FlowState", "FlowWindow",
           "FlowWindows", "ReadBack", "record_bytes"]
