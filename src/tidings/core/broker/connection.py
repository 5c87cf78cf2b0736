"""The broker's side of one client connection: its frame decoder, the handshake, refusals and holds.
(The reading machine, core/broker/reading.py, pulls its frames and decodes what follows the handshake.)

States (`ConnState`, each move checked against `TRANSITIONS`): AWAITING_HELLO (until a valid HELLO,
or the handshake deadline) -> OPEN -> CLOSED, or AWAITING_HELLO -> PEER when the first frame is
another broker's PEER_HELLO: clients and brokers share the listening port, and such a connection is
handed, with its decoder and the frames that followed the PEER_HELLO, to the broker's peer links
(core/links/peer_links.py). Who the client is, is the guard's decision (core/auth/guard.py): an anonymous HELLO
is admitted or refused at once; a HELLO with a nonce gets a CHALLENGE, and the connection stays
AWAITING_HELLO (under the same deadline) until its AUTH proves the identity
(core/auth/handshake.py). Only then are service, instance and `authenticated` set: they are what the
broker stamps on every event, so a client cannot choose another's, nor claim to have authenticated.
A service that breaks the name rule (core/auth/names.py) ends the handshake with `bad-name`.
Bytes that break framing (a frame over frame_bytes_max) or the handshake are fatal: an ERROR
frame, then Disconnect. A well-framed but malformed or unknown message is answered with an ERROR
and the connection goes on: the frame boundary is intact, so nothing else is lost. Every such ERROR,
and every close for a reason of the client's making, is a refusal, counted and logged by its error
code (`refuse`, `fail`: core/broker/refusals.py).

Reading (`Hold`): the connection is read only while nothing holds it. Four owners may hold it,
each for its own reason and each releasing only its own: its send queue while it is over
`send_queue_bytes_max` (SEND: the runtime's SendBlocked, until SendDrained), the intake while too
many of its bytes wait for the disk (DISK), the identity's publish rate while its buckets lack what
the next PUBLISH needs (RATE), and a refusal, after which the connection is not read again until
the refusal window ends (REFUSED). The frames that arrived but are not handled yet stay as bytes in
the decoder, which the reading machine pulls one at a time (core/broker/reading.py): at most what arrived before the
runtime was told to stop reading. A PUBLISH that must wait for its rate is kept, decoded, as
`waiting`, and handled first when the connection is released: a held connection's excess is not
read at all, rather than read and refused. `sync_reading` turns the holds into PauseReading and
ResumeReading for the runtime, once each way.

What a connection makes the broker hold is bounded (docs/security.md). Until the handshake is done
its frames are at most `hello_frame_bytes_max` long (the frames behind a PEER_HELLO too: the peer
links raise the limit once the peer is admitted). Every reply counts against the connection's send
queue (`charge`): `owed` is what was queued to it since its queue was last known under the
high-water mark (SendDrained, and the start of each turn of reading, since a connection over the
mark is held), and once `owed` passes `overflow_bytes_max` the connection is closed
(send-queue-overflow), whatever remains of its bytes unread. So one read of bytes costs at most that
much in replies, and a connection that does not read its replies holds at most
send_queue_bytes_max + overflow_bytes_max (+ one reply) in the runtime's buffer.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tidings.core import errors
from tidings.core.auth.guard import Guard
from tidings.core.auth.handshake import Principal, ServerHandshake
from tidings.core.auth.names import NAME_CHARS_MAX
from tidings.core.auth.policy import INSTANCE_CHARS_MAX
from tidings.core.broker.refusals import ClientErrors, RefusalWindow
from tidings.core.defaults import REFUSAL_WINDOW_NS
from tidings.core.effects import Disconnect, Effect, PauseReading, ResumeReading, Send
from tidings.core.errors import ProtocolError, TidingsError
from tidings.core.states import Transitions
from tidings.core.wire import decoders, messages
from tidings.core.wire.frames import FrameDecoder
from tidings.core.wire.types import LinkType


class ConnState(StrEnum):
    AWAITING_HELLO = "awaiting-hello"
    OPEN = "open"
    CLOSED = "closed"
    PEER = "peer"  # handed to the peer links: nothing more is read here


AWAITING_HELLO, OPEN, CLOSED, PEER = ConnState
READ = frozenset({AWAITING_HELLO, OPEN})  # the states in which what arrives is read
TRANSITIONS = Transitions[ConnState]("client connection", {
    AWAITING_HELLO: frozenset({OPEN, PEER, CLOSED}),
    OPEN: frozenset({CLOSED}),
})


@dataclass(frozen=True, slots=True)
class Opened:
    """The handshake is done: WELCOME is on its way (the composer may advise the client)."""


@dataclass(frozen=True, slots=True)
class PeerHandover:
    """The connection belongs to another broker: its PEER_HELLO and every frame after it."""

    hello: bytes
    rest: list[bytes]


ClientMessage = (
    messages.Publish | messages.Subscribe | messages.Unsubscribe | messages.StatusRequest | messages.Renew
    | messages.Release | messages.Read | messages.Heartbeat
    | PeerHandover | Opened
)


class Hold(StrEnum):
    """Why a connection is not read (each owner releases only its own)."""

    SEND = "send"  # its send queue is over send_queue_bytes_max (the runtime's SendBlocked)
    DISK = "disk"  # the intake: too many bytes wait for a sync (core/publish/intake.py)
    RATE = "rate"  # the identity's publish buckets lack what the next PUBLISH needs (core/auth/guard.py)
    REFUSED = "refused"  # refusals are held for the end of the refusal window (core/broker/refusals.py)


class ClientConnection:
    __slots__ = ("authenticated", "blocked", "conn", "decoder", "errors", "frame_bytes_max", "guard", "handshake",
                 "handshake_deadline", "holds", "identity", "instance", "overflow_bytes_max", "owed", "paused",
                 "refusals", "service", "state", "subs", "waiting", "window")

    def __init__(self, conn: int, frame_bytes_max: int, handshake_deadline: int, guard: Guard,
                 hello_frame_bytes_max: int | None = None, overflow_bytes_max: int = 1 << 20,
                 client_errors: ClientErrors | None = None, refusal_window_ns: int = REFUSAL_WINDOW_NS) -> None:
        self.conn = conn
        self.frame_bytes_max = frame_bytes_max
        if hello_frame_bytes_max is None:
            self.decoder = FrameDecoder(frame_bytes_max)
        else:
            self.decoder = FrameDecoder(min(hello_frame_bytes_max, frame_bytes_max), "hello_frame_bytes_max",
                                        final=False)
        self.overflow_bytes_max = overflow_bytes_max
        self.owed = 0  # reply bytes queued since the send queue was last known under its high-water mark
        self.state: ConnState = AWAITING_HELLO
        self.handshake_deadline = handshake_deadline
        self.guard = guard
        self.errors = client_errors or ClientErrors()  # the broker's count of refusals, by reason
        self.handshake: ServerHandshake | None = None  # a challenge sent, its proof awaited
        self.service = ""
        self.instance = ""
        self.identity = ""  # whose rules and limits apply (auth/policy.py)
        self.authenticated = False  # whether the identity proved itself: stamped on every event
        self.blocked = False  # its send queue is over send_queue_bytes_max (held: Hold.SEND)
        self.subs: dict[int, Any] = {}  # client's subscription id -> Subend
        self.waiting: messages.Publish | None = None  # a PUBLISH waiting for its rate, handled first
        self.holds: dict[Hold, None] = {}  # why it is not read (none: it is)
        self.paused = False  # whether the runtime was told to stop reading it
        self.refusals = 0  # refusals of this connection so far
        self.window = RefusalWindow(refusal_window_ns)  # its ERRORs, coalesced

    # ---- refusals --------------------------------------------------------------------------------

    def _who(self) -> str:
        return self.identity or (self.handshake.identity.name if self.handshake is not None else "")

    def refuse(self, now: int, code: str, message: str, out: list[Effect], count: int = 1,
               who: str | None = None, sub: int | None = None) -> None:
        """An ERROR for `count` refusals under `code` (about subscription `sub`, or none), counted
        and logged under `who` (by default the identity, or the one a handshake under way claims);
        sent now, or held for the end of the refusal window (core/broker/refusals.py)."""
        self.refusals += count
        self.errors.refused(now, self.conn, self._who() if who is None else who, code, message, count)
        frame = self.window.error(now, code, message, count, sub=sub)
        if frame is not None:
            out.append(Send(self.conn, frame))

    def refuse_events(self, now: int, seq: int, refused: dict[int, TidingsError], out: list[Effect]) -> None:
        """The refused events of the PUBLISH numbered from `seq` (each event's index in it -> why):
        one ERROR per reason, naming the `seqs` it stands for (core/broker/refusals.py)."""
        by_code: dict[str, list[int]] = {}
        first: dict[str, TidingsError] = {}
        for i in sorted(refused):
            problem = refused[i]
            by_code.setdefault(problem.code, []).append(seq + i)
            first.setdefault(problem.code, problem)
        for code, seqs in by_code.items():
            self.refusals += len(seqs)
            self.errors.refused(now, self.conn, self._who(), code, str(first[code]), len(seqs))
            frame = self.window.error(now, code, str(first[code]), len(seqs), seqs=seqs)
            if frame is not None:
                out.append(Send(self.conn, frame))

    def reply(self, frame: bytes, out: list[Effect]) -> bool:
        """An answer about events a held ERROR may name (an ACK): sent after it. True when sent now."""
        if self.window.until is None:  # no ERROR held (the window's end is set while one is)
            out.append(Send(self.conn, frame))
            return True
        held = self.window.reply(frame)
        if held is None:
            return False
        out.append(Send(self.conn, held))
        return True

    def ack(self, now: int, ack: bytes, out: list[Effect]) -> None:
        """An ACK, after the ERRORs held for the refusal window (charged with them when they go);
        sent now to a blocked connection, which does not read it, it counts like any reply."""
        if self.reply(ack, out) and self.blocked:
            out += self.charge(now, len(ack))

    def flush_refusals(self, now: int, out: list[Effect]) -> None:
        """The refusal window ended: the held ERRORs, coalesced, and the replies behind them, charged
        against the send queue (which may close the connection)."""
        frames = self.window.flush(now)
        if frames and self.state in READ:
            out += [Send(self.conn, frame) for frame in frames]
            out += self.charge(now, sum(len(frame) for frame in frames))

    def fail(self, now: int, code: str, message: str, who: str | None = None) -> list[Effect]:
        """A fatal refusal: what was held, the ERROR, then the connection closes (nothing more of it
        is read: the bytes it holds are freed now)."""
        self.refusals += 1
        self.errors.refused(now, self.conn, self._who() if who is None else who, code, message)
        self.state = TRANSITIONS.move(self.state, CLOSED)
        self.decoder.clear()
        self.waiting = None
        return [*(Send(self.conn, frame) for frame in self.window.flush(now)),
                Send(self.conn, messages.error(code, message)), Disconnect(self.conn, message)]

    def charge(self, now: int, nbytes: int) -> list[Effect]:
        """`nbytes` more were queued to this connection: the close, if that overflows its queue."""
        self.owed += nbytes
        if self.owed <= self.overflow_bytes_max or self.state not in READ:
            return []
        return self.fail(now, errors.SEND_QUEUE_OVERFLOW,
                         f"the connection does not read its replies: more than {self.overflow_bytes_max} bytes "
                         "queued past send_queue_bytes_max (send_queue_overflow_bytes_max)")

    # ---- reading ---------------------------------------------------------------------------------

    @property
    def readable(self) -> bool:
        """Nothing holds the connection and it is the broker's to read."""
        return not self.holds and self.state in READ

    def hold(self, why: Hold) -> None:
        self.holds[why] = None

    def release(self, why: Hold) -> bool:
        """`why` no longer holds the connection; True when nothing else does."""
        if why not in self.holds:
            return False
        del self.holds[why]
        return not self.holds

    def put_back(self, msg: messages.Publish) -> None:
        """`msg` waits (for its rate), to be handled before any frame behind it."""
        self.waiting = msg

    def sync_reading(self, out: list[Effect]) -> None:
        """Tell the runtime to stop or go on reading the connection, when that changed."""
        if self.state not in READ:
            return
        if self.holds and not self.paused:
            self.paused = True
            out.append(PauseReading(self.conn))
        elif self.paused and not self.holds:
            self.paused = False
            out.append(ResumeReading(self.conn))

    def opening(self, now: int, body: bytes, welcome_info: dict[str, Any]) -> tuple[ClientMessage | None,
                                                                                     list[Effect]]:
        """A frame before the handshake is over: HELLO, AUTH, or another broker's PEER_HELLO (then
        the handover, the only message of this state), with the effects of handling it here."""
        if self.handshake is None and decoders.message_type(body) == LinkType.PEER_HELLO:
            self.state = TRANSITIONS.move(self.state, PEER)
            # the frames behind it, judged by the handshake's limit too (a dialler waits for WELCOME)
            return PeerHandover(body, self.decoder.take()), []
        try:
            msg = decoders.decode_client_message(body)
        except ProtocolError as exc:
            return None, self.fail(now, errors.HANDSHAKE, f"expected HELLO first: {exc}")
        if isinstance(msg, messages.Hello | messages.Auth):
            effects = self.handshake_message(now, msg, welcome_info)
            return (Opened() if self.state is OPEN else None), effects
        return None, self.fail(now, errors.HANDSHAKE, "expected HELLO first")

    def framing_failure(self, now: int) -> list[Effect]:
        """The refusal and close for a stream whose framing broke, once the frames before the break
        were handled."""
        failure = self.decoder.failure
        if failure is None or self.state not in READ or self.waiting is not None:
            return []
        return self.fail(now, failure.code, str(failure))

    # ---- the handshake ---------------------------------------------------------------------------

    def handshake_message(self, now: int, msg: messages.Hello | messages.Auth,
                          welcome_info: dict[str, Any]) -> list[Effect]:
        """HELLO or AUTH (refused once the connection is open)."""
        if isinstance(msg, messages.Hello):
            return self._hello(now, msg, welcome_info)
        return self._auth(now, msg, welcome_info)

    def _hello(self, now: int, msg: messages.Hello, welcome_info: dict[str, Any]) -> list[Effect]:
        if self.state == OPEN:
            effects: list[Effect] = []
            self.refuse(now, errors.HANDSHAKE, "HELLO was already received", effects)
            return effects
        try:
            if self.handshake is not None:
                raise TidingsError("HELLO was already received; AUTH expected", errors.HANDSHAKE)
            if msg.version != messages.PROTOCOL_VERSION:
                raise TidingsError(f"protocol version {msg.version} is not supported; this broker speaks "
                                   f"{messages.PROTOCOL_VERSION}", errors.VERSION)
            if len(msg.instance) > INSTANCE_CHARS_MAX:
                raise TidingsError(f"the instance is at most {INSTANCE_CHARS_MAX} characters", errors.HANDSHAKE)
            admitted = self.guard.hello(msg.service, msg.instance, msg.nonce)
        except TidingsError as exc:
            return self.fail(now, exc.code, str(exc), who=msg.service[:NAME_CHARS_MAX])  # who it claimed to be
        if isinstance(admitted, ServerHandshake):
            self.handshake = admitted
            ch = admitted.challenge
            return [Send(self.conn, messages.challenge(ch.salt, [ch.kdf.n, ch.kdf.r, ch.kdf.p], ch.server_nonce))]
        return self._open(now, admitted, welcome_info)

    def _auth(self, now: int, msg: messages.Auth, welcome_info: dict[str, Any]) -> list[Effect]:
        """The proof for our challenge: the identity's WELCOME, signed, or a refusal and a close."""
        if self.state == OPEN:
            effects: list[Effect] = []
            self.refuse(now, errors.HANDSHAKE, "AUTH after the handshake", effects)
            return effects
        if self.handshake is None:
            return self.fail(now, errors.HANDSHAKE, "AUTH without a challenge: send HELLO with a nonce first")
        try:
            principal, signature = self.handshake.finish(msg.proof)
        except TidingsError as exc:
            self.guard.refused()
            return self.fail(now, exc.code, str(exc))
        self.handshake = None
        return self._open(now, principal, {**welcome_info, "identity": principal.identity,
                                           "server_signature": signature})

    def vouched(self, now: int, identity: str, welcome_info: dict[str, Any]) -> list[Effect]:
        """A connection of the broker's own opened as `identity` without a handshake (Guard.vouched)."""
        try:
            if self.state != AWAITING_HELLO:
                raise TidingsError("the connection is already open", errors.HANDSHAKE)
            principal = self.guard.vouched(identity, f"share{self.conn}")
        except TidingsError as exc:
            return self.fail(now, exc.code, str(exc), who=identity[:NAME_CHARS_MAX])
        return self._open(now, principal, {**welcome_info, "identity": principal.identity}, own=True)

    def _open(self, now: int, principal: Principal, welcome_info: dict[str, Any], own: bool = False) -> list[Effect]:
        try:
            self.guard.admitted(principal, self, own)
        except TidingsError as exc:
            return self.fail(now, exc.code, str(exc), who=principal.identity)
        self.service = principal.service
        self.instance = principal.instance
        self.identity = principal.identity
        self.authenticated = principal.authenticated
        self.state = TRANSITIONS.move(self.state, OPEN)
        self.decoder.limit(self.frame_bytes_max, "frame_bytes_max")
        return [Send(self.conn, messages.welcome(welcome_info))]
