"""The broker's side of one client connection: framing, the handshake, and message decoding.

States (`ConnState`, each move checked against `TRANSITIONS`): AWAITING_HELLO (until a valid HELLO,
or the handshake deadline) -> OPEN -> CLOSED, or AWAITING_HELLO -> PEER when the first frame is
another broker's PEER_HELLO: clients and brokers share the listening port, and such a connection is
handed, with its decoder and the frames that followed the PEER_HELLO, to the broker's peer links
(core/peers.py). Who the client is, is the guard's decision (core/auth/guard.py): an anonymous HELLO
is admitted or refused at once; a HELLO with a nonce gets a CHALLENGE, and the connection stays
AWAITING_HELLO (under the same deadline) until its AUTH proves the identity
(core/auth/handshake.py). Only then are service and instance set: they are what the broker stamps on
every event, so a client cannot choose another's.
Bytes that break framing (a frame over frame_bytes_max) or the handshake are fatal: an ERROR
frame, then Disconnect. A well-framed but malformed or unknown message is answered with an ERROR
and the connection goes on: the frame boundary is intact, so nothing else is lost. Every such ERROR
is a refusal, counted and logged by reason (`refuse`, `fail`: core/refusals.py).

Reading (`Hold`): the connection is read only while nothing holds it. Three owners may hold it,
each for its own reason and each releasing only its own: the intake while too many of its bytes
wait for the disk (DISK), the identity's publish rate while its buckets lack what the next
PUBLISH needs (RATE), and a refusal, after which the connection is not read again until the
refusal window ends (REFUSED). The frames that arrived with the data but are not handled yet wait
in `pending` (at most what one read brought), and a PUBLISH that must wait for its rate is put
back at their head: a held connection's excess is not read at all, rather than read and refused.
`sync_reading` turns the holds into PauseReading and ResumeReading for the runtime, once each way.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tidings.core import errors
from tidings.core.auth.guard import Guard
from tidings.core.auth.handshake import Principal, ServerHandshake
from tidings.core.effects import Disconnect, Effect, PauseReading, ResumeReading, Send
from tidings.core.errors import ProtocolError, TidingsError
from tidings.core.refusals import REFUSAL_WINDOW_NS, ClientErrors, RefusalWindow
from tidings.core.states import Transitions
from tidings.core.wire import messages
from tidings.core.wire.frames import FrameDecoder
from tidings.core.wire.peer import PEER_HELLO


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
class PeerHandover:
    """The connection belongs to another broker: its PEER_HELLO and every frame after it."""

    hello: bytes
    rest: list[bytes]


ClientMessage = (
    messages.Publish | messages.Subscribe | messages.Unsubscribe | messages.StatusRequest | messages.Renew
    | messages.Release | messages.Read
    | PeerHandover
)


class Hold(StrEnum):
    """Why a connection is not read (each owner releases only its own)."""

    DISK = "disk"  # the intake: too many bytes wait for a sync (core/intake.py)
    RATE = "rate"  # the identity's publish buckets lack what the next PUBLISH needs (core/auth/guard.py)
    REFUSED = "refused"  # refusals are held for the end of the refusal window (core/refusals.py)


class ClientConnection:
    __slots__ = ("blocked", "conn", "decoder", "errors", "guard", "handshake", "handshake_deadline", "holds",
                 "identity", "instance", "paused", "pending", "refusals", "service", "state", "subs", "window")

    def __init__(self, conn: int, frame_bytes_max: int, handshake_deadline: int, guard: Guard,
                 client_errors: ClientErrors | None = None, refusal_window_ns: int = REFUSAL_WINDOW_NS) -> None:
        self.conn = conn
        self.decoder = FrameDecoder(frame_bytes_max)
        self.state: ConnState = AWAITING_HELLO
        self.handshake_deadline = handshake_deadline
        self.guard = guard
        self.errors = client_errors or ClientErrors()  # the broker's count of refusals, by reason
        self.handshake: ServerHandshake | None = None  # a challenge sent, its proof awaited
        self.service = ""
        self.instance = ""
        self.identity = ""  # whose rules and limits apply (auth/policy.py)
        self.blocked = False
        self.subs: dict[int, Any] = {}  # client's subscription id -> Subend
        self.pending: deque[bytes | messages.Publish] = deque()  # frames arrived, not handled yet
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
        sent now, or held for the end of the refusal window (core/refusals.py)."""
        self.refusals += count
        self.errors.refused(now, self.conn, self._who() if who is None else who, code, message, count)
        frame = self.window.error(now, code, message, count, sub=sub)
        if frame is not None:
            out.append(Send(self.conn, frame))

    def refuse_events(self, now: int, seq: int, refused: dict[int, TidingsError], out: list[Effect]) -> None:
        """The refused events of the PUBLISH numbered from `seq` (each event's index in it -> why):
        one ERROR per reason, naming the `seqs` it stands for (core/refusals.py)."""
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

    def reply(self, frame: bytes, out: list[Effect]) -> None:
        """An answer about events a held ERROR may name (an ACK): sent after it."""
        held = self.window.reply(frame)
        if held is not None:
            out.append(Send(self.conn, held))

    def flush_refusals(self, now: int, out: list[Effect]) -> None:
        """The refusal window ended: the held ERRORs, coalesced, and the replies behind them."""
        out += [Send(self.conn, frame) for frame in self.window.flush(now)]

    def fail(self, now: int, code: str, message: str, who: str | None = None) -> list[Effect]:
        """A fatal refusal: what was held, the ERROR, then the connection closes."""
        self.refusals += 1
        self.errors.refused(now, self.conn, self._who() if who is None else who, code, message)
        self.state = TRANSITIONS.move(self.state, CLOSED)
        self.pending.clear()
        return [*(Send(self.conn, frame) for frame in self.window.flush(now)),
                Send(self.conn, messages.error(code, message)), Disconnect(self.conn, message)]

    # ---- reading ---------------------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Frames that arrived; handled by `next_message` while nothing holds the connection."""
        if self.state in READ:
            self.pending.extend(self.decoder.feed(data))

    @property
    def ready(self) -> bool:
        """A message is waiting and nothing holds the connection."""
        return bool(self.pending) and not self.holds and self.state in READ

    def hold(self, why: Hold) -> None:
        self.holds[why] = None

    def release(self, why: Hold) -> bool:
        """`why` no longer holds the connection; True when nothing else does."""
        if why not in self.holds:
            return False
        del self.holds[why]
        return not self.holds

    def put_back(self, msg: messages.Publish) -> None:
        """`msg` waits (for its rate) at the head of what is pending."""
        self.pending.appendleft(msg)

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

    def next_message(self, now: int, welcome_info: dict[str, Any]) -> tuple[ClientMessage | None, list[Effect]]:
        """The next pending message for the broker (None when it was the handshake's, or refused),
        with the effects of handling it here."""
        body = self.pending.popleft()
        if isinstance(body, messages.Publish):  # put back to wait for its rate
            return body, []
        if self.state == AWAITING_HELLO:
            return self._opening(now, body, welcome_info)
        try:
            msg = messages.decode_client_message(body)
        except ProtocolError as exc:
            effects: list[Effect] = []
            self.refuse(now, exc.code, str(exc), effects)
            return None, effects
        if isinstance(msg, messages.Hello):
            return None, self._hello(now, msg, welcome_info)
        if isinstance(msg, messages.Auth):
            return None, self._auth(now, msg, welcome_info)
        return msg, []

    def _opening(self, now: int, body: bytes, welcome_info: dict[str, Any]) -> tuple[ClientMessage | None,
                                                                                      list[Effect]]:
        """A frame before the handshake is over: HELLO, AUTH, or another broker's PEER_HELLO."""
        if self.handshake is None and messages.message_type(body) == PEER_HELLO:
            self.state = TRANSITIONS.move(self.state, PEER)
            rest = [b for b in self.pending if type(b) is bytes]
            self.pending.clear()
            return PeerHandover(body, rest), []
        try:
            msg = messages.decode_client_message(body)
        except ProtocolError as exc:
            return None, self.fail(now, errors.HANDSHAKE, f"expected HELLO first: {exc}")
        if isinstance(msg, messages.Hello):
            return None, self._hello(now, msg, welcome_info)
        if isinstance(msg, messages.Auth):
            return None, self._auth(now, msg, welcome_info)
        return None, self.fail(now, errors.HANDSHAKE, "expected HELLO first")

    def framing_failure(self, now: int) -> list[Effect]:
        """The refusal and close for a stream whose framing broke (after the frames before the break)."""
        failure = self.decoder.failure
        if failure is None or self.state not in READ:
            return []
        return self.fail(now, failure.code, str(failure))

    # ---- the handshake ---------------------------------------------------------------------------

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
            if not msg.service or len(msg.service) > 256 or len(msg.instance) > 256:
                raise TidingsError("service must be 1 to 256 characters, instance at most 256", errors.HANDSHAKE)
            admitted = self.guard.hello(msg.service, msg.instance, msg.nonce)
        except TidingsError as exc:
            return self.fail(now, exc.code, str(exc), who=msg.service[:256])  # who it claimed to be
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

    def _open(self, now: int, principal: Principal, welcome_info: dict[str, Any]) -> list[Effect]:
        try:
            self.guard.admitted(principal, self)
        except TidingsError as exc:
            return self.fail(now, exc.code, str(exc), who=principal.identity)
        self.service = principal.service
        self.instance = principal.instance
        self.identity = principal.identity
        self.state = TRANSITIONS.move(self.state, OPEN)
        return [Send(self.conn, messages.welcome(welcome_info))]
