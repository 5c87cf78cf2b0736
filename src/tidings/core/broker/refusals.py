"""What the broker refused its clients: counts by reason for the operator, lines for the log, and
the shape of a coalesced ERROR.

Every ERROR the broker sends a client because of what the client sent (a frame past
frame_bytes_max or one that does not decode, an unknown message, a failed or late handshake, a
proof that does not verify, a limit, a forbidden channel, a bad pattern or filter, ...) is a
refusal. The connection (core/broker/connection.py `refuse`, `fail`) counts each here under its error code
(core/errors.py): the code is the reason, so a code added later is counted, shown in `/status`
(`client_errors`) and in `/metrics` (`tidings_client_errors_total{reason}`) with no change here.
Errors that are not the client's doing (`log-unreadable`, `lease-expired` after a lost renewal,
`shutting-down`) are not refusals and are not counted.

The log is rate-limited per connection: the first refusal of a connection in a window of
`log_interval_ns` becomes a line at once (`take_log`, for the runtime, which adds the remote
address); the refusals after it in the window are only counted, and the next line (or the
connection's end) says how many were not logged. A flood of refusals thus costs one log line per
connection and second, and says how big it was.

Coalescing (`RefusalWindow`, one per connection): a refusal opens a window of `refusal_window_ns`
for its reason, and its ERROR goes at once. A refusal for the same reason while that window is
open is held, and so is the connection (the broker reads nothing more from it, core/broker/connection.py
Hold.REFUSED), until the window ends: then one ERROR per reason stands for every refusal held, with
their `count`, and a new window opens. A connection is thus sent at most one ERROR per reason and
window however fast it sends what is refused, and has at most two messages refused for one reason
handled per window. A PUBLISH's refused events are named in one ERROR per reason: the first
refused `seq`, the `count` and their `seqs` as inclusive ranges (`coalesced_error`); a refused
SUBSCRIBE by its `sub`, and held ones by `subs` (one held ERROR may name both events and
subscriptions). Replies about what a held ERROR may name (the ACK of a PUBLISH) are held behind it
(`reply`), so a client always has an event's ERROR before its ACK (docs/protocol.md).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from tidings.core import errors
from tidings.core.effects import Disconnect, Effect, Send
from tidings.core.units import SECOND_NS
from tidings.core.wire import messages

LOG_LINES_KEPT_MAX = 256  # lines waiting for the runtime's log; one per connection and window


@dataclass(frozen=True, slots=True)
class RefusalLine:
    """One log line: `count` refusals of connection `conn` (`who`: its identity, or the name it
    claimed in a failed handshake), the first of which said `message` under `code`, and
    `suppressed` earlier refusals of the connection that had no line of their own."""

    conn: int
    who: str
    code: str
    message: str
    count: int
    suppressed: int


class _Window:
    __slots__ = ("opened", "suppressed")

    def __init__(self, opened: int) -> None:
        self.opened = opened
        self.suppressed = 0


class ClientErrors:
    """The broker's refusals of its clients: counted by reason, logged at most once a window per
    connection."""

    __slots__ = ("_lines", "_windows", "by_reason", "lines_dropped", "log_interval_ns")

    def __init__(self, log_interval_ns: int = SECOND_NS) -> None:
        self.log_interval_ns = log_interval_ns
        self.by_reason: dict[str, int] = {}  # error code -> refusals since the broker started
        self._windows: dict[int, _Window] = {}  # conn -> its log window, while it has one
        self._lines: deque[RefusalLine] = deque()
        self.lines_dropped = 0  # lines past LOG_LINES_KEPT_MAX between two takes (counted, not logged)

    def refused(self, now: int, conn: int, who: str, code: str, message: str, count: int = 1) -> None:
        """`count` refusals of `conn` under `code` (the first saying `message`)."""
        self.by_reason[code] = self.by_reason.get(code, 0) + count
        window = self._windows.get(conn)
        if window is not None and now - window.opened < self.log_interval_ns:
            window.suppressed += count
            return
        suppressed = 0 if window is None else window.suppressed
        self._windows[conn] = _Window(now)
        self._line(RefusalLine(conn, who, code, message, count, suppressed))

    def lost(self, conn: int, who: str) -> None:
        """The connection is gone: a line for its refusals not logged yet, if any."""
        window = self._windows.pop(conn, None)
        if window is not None and window.suppressed:
            self._line(RefusalLine(conn, who, "", "", 0, window.suppressed))

    def _line(self, line: RefusalLine) -> None:
        if len(self._lines) >= LOG_LINES_KEPT_MAX:
            self.lines_dropped += 1
        else:
            self._lines.append(line)

    def take_log(self) -> tuple[list[RefusalLine], int]:
        """The lines since the last call, for the runtime's log, and how many more there were
        (past LOG_LINES_KEPT_MAX: thousands of connections refused at once, say)."""
        out, dropped = list(self._lines), self.lines_dropped
        self._lines.clear()
        self.lines_dropped = 0
        return out, dropped

    def status(self) -> dict[str, Any]:
        return {"client_errors": dict(sorted(self.by_reason.items()))}


def seq_ranges(seqs: list[int]) -> list[list[int]]:
    """Sorted distinct sequence numbers as inclusive ranges: [3, 4, 5, 9] -> [[3, 5], [9, 9]]."""
    ranges: list[list[int]] = []
    for s in seqs:
        if ranges and s == ranges[-1][1] + 1:
            ranges[-1][1] = s
        else:
            ranges.append([s, s])
    return ranges


def coalesced_error(code: str, message: str, seqs: list[int]) -> bytes:
    """One ERROR for the events `seqs` (sorted, distinct) of a PUBLISH, all refused under `code`;
    `message` is the first one's reason."""
    if len(seqs) > 1:
        message = f"{message} (and {len(seqs) - 1} more events for the same reason)"
    return messages.error(code, message, seq=seqs[0], count=len(seqs), seqs=seq_ranges(seqs))


class _Held:
    __slots__ = ("count", "message", "seqs", "subs")

    def __init__(self, message: str) -> None:
        self.message = message
        self.count = 0
        self.seqs: list[int] = []  # the refused events' seqs
        self.subs: list[int] = []  # the refused subscriptions


class RefusalWindow:
    """One connection's refusals, coalesced: at most one ERROR per reason and window."""

    __slots__ = ("_held", "_opened", "_replies", "until", "window_ns")

    def __init__(self, window_ns: int) -> None:
        self.window_ns = window_ns
        self._opened: dict[str, int] = {}  # code -> when its window opened (at most one per code)
        self._held: dict[str, _Held] = {}  # code -> what its next ERROR stands for
        self._replies: list[bytes] = []  # replies held behind the held ERRORs
        self.until: int | None = None  # while refusals are held: when they are sent

    @property
    def holding(self) -> bool:
        """Refusals wait for the end of their window (the connection is not read meanwhile)."""
        return bool(self._held)

    def error(self, now: int, code: str, message: str, count: int = 1, seqs: list[int] | None = None,
              sub: int | None = None) -> bytes | None:
        """The ERROR for `count` refusals under `code` (about events `seqs` of a PUBLISH, or
        subscription `sub`, or neither), or None when it is held for the end of the window."""
        opened = self._opened.get(code)
        if (opened is None or now - opened >= self.window_ns) and code not in self._held:  # (none held overtaken)
            self._opened[code] = now
            if seqs:
                return coalesced_error(code, message, seqs)
            context: dict[str, Any] = {} if sub is None else {"sub": sub}
            return messages.error(code, message, **context, **({"count": count} if count > 1 else {}))
        held = self._held.get(code)
        if held is None:
            held = self._held[code] = _Held(message)
        held.count += count
        held.seqs += seqs or []
        if sub is not None:
            held.subs.append(sub)
        self.until = max(self.until or 0, (now if opened is None else opened) + self.window_ns)
        return None

    def reply(self, frame: bytes) -> bytes | None:
        """`frame` to send now, or None when it is held behind the held ERRORs."""
        if self._held:
            self._replies.append(frame)
            return None
        return frame

    def flush(self, now: int) -> list[bytes]:
        """The window ended (or the connection closes): one ERROR per reason for what was held, then
        the replies held behind them; a new window opens for each reason sent."""
        out: list[bytes] = []
        for code, held in self._held.items():
            more = f" (and {held.count - 1} more refusals for the same reason)" if held.count > 1 else ""
            context: dict[str, Any] = {"count": held.count}
            if held.seqs:
                seqs = sorted(set(held.seqs))
                context |= {"seq": seqs[0], "seqs": seq_ranges(seqs)}
            if held.subs:
                context |= {"sub": held.subs[0], "subs": held.subs}
            out.append(messages.error(code, held.message + more, **context))
            self._opened[code] = now
        out += self._replies
        self._held.clear()
        self._replies.clear()
        self.until = None
        return out


def not_in_overlay(conn: int) -> list[Effect]:
    """A PEER_HELLO reached a broker that is in no overlay (yet): nobody to talk to. (Not counted:
    the peer is not a client, and did nothing wrong.)"""
    return [Send(conn, messages.error(errors.HANDSHAKE, "this broker is not in an overlay")),
            Disconnect(conn, "peer before overlay start")]
