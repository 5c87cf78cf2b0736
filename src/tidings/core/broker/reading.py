"""Reading the broker's client connections: the one owner of whether a connection is read, and of
what reading it may cost (docs/security.md).

Theory of operation. The runtime hands the broker bytes; this machine pushes them into the
connection's decoder and serves the connection (`received`: `serve`, then `read_done`): it pulls
its frames one at a time, in order, while nothing holds it (connection.py `Hold`), decodes each
(the connection judges the handshake's frames: `ClientConnection.opening`) and hands the message,
as soon as it is read, to the machine that owns it: its type's owner in the table the composer
gives (`serve_to`: a PUBLISH goes straight to the intake), else the composer's dispatch. So what a
message changes (a hold, a refusal, a close) bears on the next one. An owner that cannot take a
PUBLISH yet (its identity's rate) says how long it must wait: the PUBLISH is put back and the
connection held (RATE). A release (`release`, or a timer's: `handle_timeout` says which hold
ended, as a `ReadingEffect`, and `carry_out` serves it) serves what waited the same way. A
connection is read only while its hold set is empty; each owner holds it for its own reason and
only that owner releases it:

- SEND: the runtime's SendBlocked until SendDrained (`flow`): its requests would queue replies;
- DISK: the intake, while too many bytes wait for the disk (released through `release`);
- RATE: the identity's publish rate; the PUBLISH waits, decoded, at the connection's head, and the
  hold ends at a deadline (`hold`, a `ReadTimer`);
- REFUSED: a refusal within the refusal window of another (core/broker/refusals.py): the
  connection is not read until the window ends, when its held ERRORs go, coalesced (`ReadTimer`).

`unread` says which connections are held, for the machines that must not punish a client for what
the broker did not read (leases run on, a stalled partial frame waits on).

Costs. What each message is answered at once counts against the connection's send queue
(`ClientConnection.charge`): past `send_queue_overflow_bytes_max` it is closed, whatever remains
unread. Bytes held in partial frames, by client and peer connections alike, count against one
budget, `partial_frames_bytes_max` (wire/frames.py `PartialFrames`), and a partial frame that gets
no byte for `frame_progress_timeout_ns` while the connection is read closes it (`frames_overdue`);
a held connection's whole frames wait unread as bytes, so only its partial one counts. A
connection owes its HELLO (and AUTH) within `handshake_timeout_ns` (`HandshakeTimer`), and the
broker accepts at most `connections_max` of them.

States: a connection's own (connection.py `ConnState`); this machine adds only the holds and timers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from tidings.core import errors
from tidings.core.auth.guard import Guard
from tidings.core.broker.advice import RouteAdvice
from tidings.core.broker.connection import AWAITING_HELLO, CLOSED, OPEN, READ, ClientConnection, ClientMessage, Hold
from tidings.core.broker.refusals import ClientErrors
from tidings.core.config import BrokerConfig
from tidings.core.deadlines import Alarm, Deadlines
from tidings.core.effects import Disconnect, Effect, Send
from tidings.core.errors import ProtocolError
from tidings.core.wire import decoders, messages
from tidings.core.wire.frames import PartialFrames

CONNECTIONS_REPORTED_MAX = 256  # client connections listed one by one in `status`


class HandshakeTimer(NamedTuple):
    """The client connection `conn` owes its HELLO (and AUTH) by now."""

    conn: int


class ReadTimer(NamedTuple):
    """The client connection `conn` is no longer held for `hold` (its rate, a refusal)."""

    conn: int
    hold: Hold


ReadingTimer = HandshakeTimer | ReadTimer


@dataclass(frozen=True, slots=True)
class EndHold:
    """Read `conn` again as far as `hold` goes (a refusal window's held ERRORs go first)."""

    conn: int
    hold: Hold


@dataclass(frozen=True, slots=True)
class ExpireHandshake:
    """Close `conn` if it still owes its HELLO (or AUTH)."""

    conn: int


# what the timers decided, carried out in order (`carry_out`): each may serve a connection, whose
# messages go to their owners as they come
ReadingEffect = EndHold | ExpireHandshake


# the owner of a message type: handles the message read on the connection at `now` (its effects
# appended to `out`), and returns 0, or how long it must wait unread (a PUBLISH over its rate)
Owner = Callable[[int, ClientConnection, Any, list[Effect]], int]


def _unowned(now: int, c: ClientConnection, msg: ClientMessage, out: list[Effect]) -> int:
    raise AssertionError(f"a {type(msg).__name__} was read before the composer said who owns it (serve_to)")


class Reading:
    __slots__ = ("advice", "client_errors", "config", "connections", "dispatch", "guard", "owners", "partials",
                 "timers")

    def __init__(self, config: BrokerConfig, guard: Guard, client_errors: ClientErrors, advice: RouteAdvice,
                 alarm: Alarm | None = None) -> None:
        """`alarm`: the broker's earliest deadline, told when a timer of this machine moves."""
        self.config = config
        self.guard = guard
        self.client_errors = client_errors
        self.advice = advice  # what WELCOME says of this broker (core/broker/advice.py)
        self.connections: dict[int, ClientConnection] = {}
        # the bytes held in partial frames by every connection, client or peer (wire/frames.py)
        self.partials = PartialFrames(config.partial_frames_bytes_max, config.frame_progress_timeout_ns, alarm)
        self.timers: Deadlines[ReadingTimer] = Deadlines(alarm)
        self.owners: Mapping[type, Owner] = {}  # by message type (`serve_to`)
        self.dispatch: Owner = _unowned  # every other message: the composer's

    def serve_to(self, dispatch: Owner, owners: Mapping[type, Owner]) -> None:
        """Who handles what is read: the owner of each type in `owners`, every other message (an
        `Opened` connection, a `PeerHandover`) `dispatch`."""
        self.dispatch = dispatch
        self.owners = owners

    def next_deadline(self) -> int | None:
        deadlines = [d for d in (self.timers.next_deadline(), self.partials.next_deadline()) if d is not None]
        return min(deadlines) if deadlines else None

    # ---- a connection's life ---------------------------------------------------------------------

    def accept(self, now: int, conn: int, out: list[Effect]) -> None:
        """A new connection: read until its handshake deadline, unless connections_max is reached."""
        assert conn not in self.connections
        cfg = self.config
        if len(self.connections) >= cfg.connections_max:
            self.client_errors.refused(now, conn, "", errors.HANDSHAKE, "too many connections")
            out.append(Send(conn, messages.error(errors.HANDSHAKE, "too many connections")))
            out.append(Disconnect(conn, "connections_max reached"))
            return
        deadline = now + cfg.handshake_timeout_ns
        self.connections[conn] = ClientConnection(conn, cfg.frame_bytes_max, deadline, self.guard,
                                                  cfg.hello_frame_bytes_max, cfg.send_queue_overflow_bytes_max,
                                                  self.client_errors, cfg.refusal_window_ns)
        self.timers.set(HandshakeTimer(conn), deadline)

    def vouch(self, now: int, conn: int, identity: str, out: list[Effect]) -> None:
        """A connection of the broker's own, accepted, opened as `identity` (ClientConnection.vouched)."""
        c = self.connections.get(conn)
        if c is not None:
            out += c.vouched(now, identity, self.advice.welcome_info(self.open_clients()))
            self.timers.cancel(HandshakeTimer(conn))

    def lost(self, conn: int) -> ClientConnection | None:
        """The connection is gone (client or peer): what it held is freed; the client connection it
        was, if any, for the composer to end its subscriptions."""
        self.timers.cancel(HandshakeTimer(conn))
        self.partials.forget(conn)
        c = self.connections.pop(conn, None)
        self.client_errors.lost(conn, "" if c is None else c.identity)
        if c is not None:
            self.timers.cancel(ReadTimer(conn, Hold.RATE))
            self.timers.cancel(ReadTimer(conn, Hold.REFUSED))
            self.guard.left(c.identity, conn)
        return c

    def handed_over(self, c: ClientConnection) -> None:
        """The connection turned out to be another broker's: the peer links read it from now."""
        del self.connections[c.conn]

    # ---- reading ---------------------------------------------------------------------------------

    def received(self, now: int, conn: int, data: bytes, out: list[Effect]) -> None:
        """Bytes from client connection `conn` (nothing when it is not read): its messages served
        (`serve`), then its partial frame charged to the budget (`read_done`)."""
        c = self.connections.get(conn)
        if c is None or c.state not in READ:
            return
        c.decoder.push(data)
        self.serve(now, c, out)
        self.read_done(now, c, out)

    def read_done(self, now: int, c: ClientConnection, out: list[Effect]) -> None:
        """After serving what arrived: its partial frame charged to the budget."""
        if c.state == CLOSED:
            self.partials.forget(c.conn)
        elif c.state in READ:  # a held connection's whole frames wait unread, as bytes: only the partial one counts
            held = c.decoder.partial_bytes if c.holds else c.decoder.held_bytes
            if not self.partials.update(now, c.conn, held):
                self.partials.forget(c.conn)
                out += c.fail(now, errors.PARTIAL_FRAMES_BUDGET, self.over_budget(held))

    def serve(self, now: int, c: ClientConnection, out: list[Effect]) -> None:
        """The connection's messages in order, pulled one at a time from its decoder while nothing
        holds it (connection.py Hold), each handed to its owner as it is read: a PUBLISH its rate
        cannot take yet waits for it; a refusal within the refusal window of another is held with
        the connection until the window ends (core/broker/refusals.py), so a flood of refused
        requests is handled at most two messages a window, at next to no cost. What each message
        is answered at once counts against the connection's send queue (`charge`): past
        send_queue_overflow_bytes_max it is closed."""
        conn = c.conn
        if not c.blocked:  # read only while its send queue is under the high-water mark
            c.owed = 0
        holds, window, welcome = c.holds, c.window, self.advice.features  # (the loop is the intake's hot path)
        decoder, owners, dispatch = c.decoder, self.owners, self.dispatch
        # while c.readable, and something waits to be pulled
        while not holds and c.state in READ and (decoder.held_bytes or c.waiting is not None):
            mark = len(out)
            msg: ClientMessage | None = c.waiting  # a PUBLISH that waited for its rate goes first
            if msg is not None:
                c.waiting = None
            else:
                body = decoder.pull()
                if body is None:
                    break
                msg = self._message(now, c, body, welcome, out)
            if msg is not None:
                wait_ns = owners.get(type(msg), dispatch)(now, c, msg, out)
                if wait_ns:  # over its rate: the PUBLISH waits unread, and so does the connection
                    assert isinstance(msg, messages.Publish), "only a PUBLISH waits (its identity's rates)"
                    c.put_back(msg)
                    self.hold(c, Hold.RATE, now + max(wait_ns, self.config.publish_wait_ns_min))
            replied = 0  # what it was answered at once counts against its send queue
            for i in range(mark, len(out)):
                e = out[i]
                if type(e) is Send and e.conn == conn:
                    replied += len(e.data)
            if replied:
                out += c.charge(now, replied)  # its replies overflowed its send queue: closed, the rest unread
            if window.until is not None:
                self.hold_refusals(c, out)
        if not c.holds:
            out += c.framing_failure(now)
        c.sync_reading(out)

    def _message(self, now: int, c: ClientConnection, body: bytes, welcome: dict[str, Any],
                 out: list[Effect]) -> ClientMessage | None:
        """What a frame says, for its owner; None when there is nothing to hand over: it did not
        decode (refused: the frame boundary is intact, the connection goes on), or it was HELLO or
        AUTH (the connection's: during the handshake, whose frames it judges, and refused after)."""
        if c.state is not OPEN:
            msg, effects = c.opening(now, body, self.advice.welcome_info(self.open_clients()))
            if effects:
                out += effects
            if c.state is not AWAITING_HELLO:
                self.timers.cancel(HandshakeTimer(c.conn))
            return msg
        try:
            decoded = decoders.decode_client_message(body)
        except ProtocolError as exc:
            c.refuse(now, exc.code, str(exc), out)
            return None
        if isinstance(decoded, messages.Hello | messages.Auth):
            out += c.handshake_message(now, decoded, welcome)
            return None
        return decoded

    def hold(self, c: ClientConnection, hold: Hold, until: int) -> None:
        """`c` is not read until `until` (or until released) for `hold`."""
        c.hold(hold)
        self.timers.set(ReadTimer(c.conn, hold), until)

    def hold_refusals(self, c: ClientConnection, out: list[Effect]) -> None:
        """Refusals held for the end of their window (core/broker/refusals.py): the connection waits too."""
        until = c.window.until
        if until is not None and self.timers.when(ReadTimer(c.conn, Hold.REFUSED)) != until:
            self.hold(c, Hold.REFUSED, until)  # (a later refusal of another reason: its window's end)
            c.sync_reading(out)

    def release(self, now: int, conn: int, hold: Hold, out: list[Effect]) -> None:
        """`hold` no longer holds `conn`: what waited is handled, and it is read again unless
        something else holds it."""
        c = self.connections.get(conn)
        if c is not None and c.release(hold):
            self.serve(now, c, out)
            if c.state == CLOSED:
                self.partials.forget(conn)
            elif c.readable and conn in self.partials.held:  # read again: its partial frame's clock starts anew
                self.partials.wait(now, conn)

    def flow(self, conn: int, blocked: bool, out: list[Effect]) -> ClientConnection | None:
        """The connection's send queue passed send_queue_bytes_max (`blocked`: held, Hold.SEND) or
        drained (the composer then `release`s it): the connection, or None when nothing changed."""
        c = self.connections.get(conn)
        if c is None or c.blocked == blocked:
            return None
        c.blocked = blocked
        if blocked:
            c.hold(Hold.SEND)
            c.sync_reading(out)
        else:
            c.owed = 0
        return c

    def unread(self, conn: int) -> bool:
        """Whether something holds `conn` (connection.py Hold): what it sent (a RENEW too) waits unread."""
        c = self.connections.get(conn)
        return c is not None and bool(c.holds)

    def handle_timeout(self, now: int) -> list[ReadingEffect]:
        """Holds that ended and handshakes due by `now`, earliest first, for `carry_out`. (The
        partial frames' deadlines are `frames_overdue`'s.)"""
        return [EndHold(key.conn, key.hold) if type(key) is ReadTimer else ExpireHandshake(key.conn)
                for key in self.timers.pop_due(now)]

    def timed_out(self, now: int, out: list[Effect]) -> None:
        """`handle_timeout`, each effect carried out in order (`carry_out`)."""
        for eff in self.handle_timeout(now):
            self.carry_out(now, eff, out)

    def carry_out(self, now: int, eff: ReadingEffect, out: list[Effect]) -> None:
        """What a timer decided (`handle_timeout`): a hold that ended serves what waited (a refusal
        window's held ERRORs go first); a handshake not done in time closes its connection."""
        c = self.connections.get(eff.conn)
        if type(eff) is EndHold:
            if c is not None and eff.hold is Hold.REFUSED:
                c.flush_refusals(now, out)  # one ERROR per reason for what the window held
            self.release(now, eff.conn, eff.hold, out)
        elif c is not None and c.state == AWAITING_HELLO:
            self.partials.forget(c.conn)
            out += c.fail(now, errors.HANDSHAKE_TIMEOUT, "no HELLO within the handshake timeout")

    # ---- partial frames (docs/security.md) --------------------------------------------------------

    def over_budget(self, held: int) -> str:
        return (f"a partial frame of {held} bytes would take the bytes held in partial frames past "
                f"partial_frames_bytes_max={self.config.partial_frames_bytes_max}; retry")

    def peer_partial(self, now: int, conn: int, held: int) -> str | None:
        """A peer connection holds `held` bytes in a partial frame: the refusal, when that is past the budget."""
        if not held and conn not in self.partials.held:  # (the usual read: whole frames, and none held before)
            return None
        if self.partials.update(now, conn, held):
            return None
        self.partials.forget(conn)
        return self.over_budget(held)

    def frames_overdue(self, now: int, out: list[Effect]) -> list[tuple[int, str]]:
        """Client connections whose partial frame stopped arriving are closed; those held (for any
        reason: connection.py Hold) wait on. Returns the other connections overdue (peers', for the
        composer to close), with the reason."""
        peers: list[tuple[int, str]] = []
        for conn in self.partials.overdue(now):
            c = self.connections.get(conn)
            if c is not None and c.holds:
                self.partials.wait(now, conn)
                continue
            self.partials.forget(conn)
            text = (f"a partial frame got no byte for frame_progress_timeout_ns="
                    f"{self.config.frame_progress_timeout_ns}")
            if c is None:
                peers.append((conn, text))
            elif c.state in (AWAITING_HELLO, OPEN):  # else closing already
                out += c.fail(now, errors.FRAME_STALLED, text)
        return peers

    # ---- observation -----------------------------------------------------------------------------

    def status(self, subscription: Callable[[Any], dict[str, Any]]) -> list[dict[str, Any]]:
        """Each open client connection (the first CONNECTIONS_REPORTED_MAX) with its subscriptions'
        `subscription` status."""
        open_ = [c for c in self.connections.values() if c.state == OPEN][:CONNECTIONS_REPORTED_MAX]
        return [{"conn": c.conn, "service": c.service, "instance": c.instance, "identity": c.identity,
                 "blocked": c.blocked, "subscriptions": [subscription(s) for s in c.subs.values()]}
                for c in open_]

    def open_conns(self) -> list[int]:
        return [c.conn for c in self.connections.values() if c.state == OPEN]

    def open_clients(self) -> int:
        return sum(1 for c in self.connections.values() if c.state == OPEN)

    def blocked(self) -> int:
        """Connections whose send queue is full."""
        return sum(1 for c in self.connections.values() if c.blocked)
