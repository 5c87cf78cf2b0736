"""Flow control of a pubend's first-time knowledge: per tree, a window of credit its root's ACKs open.

Theory of operation. Without it a fast publisher overruns a slow subscriber's broker: the pubend
sends each sync's knowledge to the tree's rendez-vous point at once, the root's link to the slow
broker blocks, the root's stream cache (`stream_cache_bytes_max`) and the peer links' queues
(`peer_queue_bytes_max`) fill, and what they then drop comes back as nacks that the pubend answers
by reading its log (measured on gd_bench with the subscriber's broker stalled 300 ms a second: 61
knowledge messages dropped on the pubend's link, 57 nacks of 4.25M ticks, 972,700 ticks read back
and sent again, and the subscribers not done after their time limit).

The root acknowledges a tree's stream only through what every consumer below it has (istream.py),
so its ACK is end to end. A tree's `FlowWindow` keeps the first-time messages sent but not yet
acknowledged (their last tick and record bytes), and lets a new one go only while fewer than
`window_bytes` of records are in flight: at most the window plus one message is beyond the root's
ACK, which the root's cache and the links' queues hold without dropping anything. A message the
window has no room for is *held* here, in order, behind those held before it; the root's ACKs
release them as they make room. Holding is always sound: the pubend's log has every held event,
knowledge is soft state, and a held range is simply not known downstream yet (the source sends
no silence past a held message, which would claim its D ticks were F, and no later message
overtakes one held, so no broker sees a gap to nack).

Two limits keep a stuck receiver from costing more than a slow one:

- `stall_ns`: a window whose root's ACKs have not moved for this long while it holds (a broker
  below is stopped, or a link is down) goes STALLED: what it holds and whatever comes next is sent
  at once, as without flow control, so a stuck subscriber's broker does not stop the tree's other
  subscribers; whatever is lost below is nacked and answered from the log as before. The first ACK
  that moves brings pacing back.
- `hold_bytes_max`: past it, the oldest held messages are sent beyond the window (counted in
  `overflows`): memory stays bounded when the publisher outruns the tree for long.

States (`FlowState`, moves in `TRANSITIONS`): OPEN (nothing held) -> HELD (the window is full and
a message waits) -> OPEN (ACKs made room for every held message) or -> STALLED (no ACK moved for
`stall_ns`) -> OPEN (an ACK moved). The stall deadline is one timer per held tree, in the one
deadline structure (`Deadlines`, under the broker's alarm).

Invariants: `held_bytes` is the sum of the held messages' record bytes and at most
`hold_bytes_max` after any call; a STALLED or OPEN window holds nothing; a HELD window has a stall
timer and holds at least one message; `in_flight_bytes` is the sum over `in_flight`, whose ticks
increase.
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
    STALLED: frozenset({OPEN}),
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


def record_bytes(message: PublishOnTree) -> int:
    return sum(map(len, message.message.records))


class FlowWindow:
    """One tree's window: messages in flight (last tick, record bytes) and messages held."""

    __slots__ = ("acked", "held", "held_bytes", "in_flight", "in_flight_bytes", "state")

    def __init__(self) -> None:
        self.state = OPEN
        self.acked = -1  # the root's ACK, as far as it moved
        self.in_flight: deque[tuple[int, int]] = deque()
        self.in_flight_bytes = 0
        self.held: deque[PublishOnTree] = deque()
        self.held_bytes = 0

    def move(self, state: FlowState) -> None:
        self.state = TRANSITIONS.move(self.state, state)

    def sent(self, message: PublishOnTree) -> PublishOnTree:
        size = record_bytes(message)
        if size:
            self.in_flight.append((message.message.through, size))
            self.in_flight_bytes += size
        return message

    def room(self, window_bytes: int) -> bool:
        return self.in_flight_bytes < window_bytes

    def hold(self, message: PublishOnTree) -> None:
        self.held.append(message)
        self.held_bytes += record_bytes(message)

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
        self.overflows = 0  # messages sent beyond the window because the hold was full

    def window(self, tree: str) -> FlowWindow | None:
        return self._windows.get(tree)

    def holding(self, tree: str) -> bool:
        """Messages of `tree` wait for its root's ACKs: nothing later may go before them."""
        window = self._windows.get(tree)
        return window is not None and window.state == HELD

    @property
    def held_bytes(self) -> int:
        return sum(w.held_bytes for w in self._windows.values())

    def offer(self, now: int, tree: str, messages: list[PublishOnTree]) -> list[PublishOnTree]:
        """First-time knowledge of `tree`, in order: what may go now; the rest is held."""
        limits = self.limits
        if not limits.window_bytes:
            return messages
        window = self._windows.get(tree)
        if window is None:
            window = self._windows[tree] = FlowWindow()
        out: list[PublishOnTree] = []
        for message in messages:
            if window.state == STALLED or (window.state == OPEN and window.room(limits.window_bytes)):
                out.append(window.sent(message))
                continue
            if window.state == OPEN:
                window.move(HELD)
                self.holds += 1
                self.timers.set(FlowStall(tree), now + limits.stall_ns)
            window.hold(message)
            self.held_messages += 1
        while window.held_bytes > limits.hold_bytes_max:
            out.append(window.unhold())
            self.overflows += 1
        if window.state == HELD and not window.held:
            self._opened(tree, window)
        return out

    def acked(self, now: int, tree: str, through: int) -> list[PublishOnTree]:
        """The root of `tree` acknowledged through `through`: the held messages there is room for now."""
        window = self._windows.get(tree)
        if window is None or not window.ack(through):
            return []
        if window.state == STALLED:
            window.move(OPEN)  # the root hears again: pace from here
            return []
        if window.state != HELD:
            return []
        out: list[PublishOnTree] = []
        while window.held and window.room(self.limits.window_bytes):
            out.append(window.unhold())
        if window.held:
            self.timers.set(FlowStall(tree), now + self.limits.stall_ns)
        else:
            self._opened(tree, window)
        return out

    def _opened(self, tree: str, window: FlowWindow) -> None:
        window.move(OPEN)
        self.timers.cancel(FlowStall(tree))

    def drop(self, tree: str) -> None:
        """The pubend drops or forgets `tree`'s stream: nobody below needs it (its root said it has
        no members) or it is idle and acknowledged. What it held is dropped with it: a member that
        joins later nacks what it wants from its start, answered from the log."""
        self._windows.pop(tree, None)
        self.timers.cancel(FlowStall(tree))

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def handle_timeout(self, now: int) -> list[PublishOnTree]:
        """Windows whose root's ACKs stopped for `stall_ns` while holding: everything they hold goes."""
        out: list[PublishOnTree] = []
        for key in self.timers.pop_due(now):
            window = self._windows.get(key.tree)
            if window is None or window.state != HELD:
                continue
            window.move(STALLED)
            self.stalls += 1
            while window.held:
                out.append(window.unhold())
        return out

    def status(self) -> dict[str, Any]:
        return {"flow_holds": self.holds, "flow_held_messages": self.held_messages, "flow_stalls": self.stalls,
                "flow_overflows": self.overflows, "flow_held_bytes": self.held_bytes,
                "flow_windows_held": sum(1 for w in self._windows.values() if w.state == HELD)}


__all__ = ["DEFAULT_LIMITS", "TRANSITIONS", "FlowLimits",
            "FlowStall", "FlowState", "FlowWindow", "FlowWindows", "record_bytes"]
