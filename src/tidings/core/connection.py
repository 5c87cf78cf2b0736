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
and the connection goes on: the frame boundary is intact, so nothing else is lost.

What a connection makes the broker hold is bounded (docs/security.md). Until the handshake is done
its frames are at most `hello_frame_bytes_max` long (the frames behind a PEER_HELLO too: the peer
links raise the limit once the peer is admitted). Every reply counts against the connection's send
queue: `owed` is what was queued to it since its queue was last known under the high-water mark
(`send_queue_bytes_max`: the runtime's SendBlocked and SendDrained, and the start of each read,
since a connection over the mark is not read), and once `owed` passes `overflow_bytes_max` the
connection is closed (send-queue-overflow), whatever remains of its bytes unread. So one read of
bytes costs at most that much in replies, and a connection that does not read its replies holds
at most send_queue_bytes_max + overflow_bytes_max (+ one reply) in the runtime's buffer.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tidings.core import errors
from tidings.core.auth.guard import Guard
from tidings.core.auth.handshake import Principal, ServerHandshake
from tidings.core.effects import Disconnect, Effect, Send
from tidings.core.errors import ProtocolError, TidingsError
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


class ClientConnection:
    __slots__ = ("blocked", "conn", "decoder", "frame_bytes_max", "guard", "handshake", "handshake_deadline",
                 "identity", "instance", "overflow_bytes_max", "owed", "service", "state", "subs")

    def __init__(self, conn: int, frame_bytes_max: int, handshake_deadline: int, guard: Guard,
                 hello_frame_bytes_max: int | None = None, overflow_bytes_max: int = 1 << 20) -> None:
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
        self.handshake: ServerHandshake | None = None  # a challenge sent, its proof awaited
        self.service = ""
        self.instance = ""
        self.identity = ""  # whose rules and limits apply (auth/policy.py)
        self.blocked = False
        self.subs: dict[int, Any] = {}  # client's subscription id -> Subend

    def fail(self, code: str, message: str) -> list[Effect]:
        self.state = TRANSITIONS.move(self.state, CLOSED)
        self.decoder.clear()  # nothing more is read
        return [Send(self.conn, messages.error(code, message)), Disconnect(self.conn, message)]

    def charge(self, nbytes: int) -> list[Effect]:
        """`nbytes` more were queued to this connection: the close, if that overflows its queue."""
        self.owed += nbytes
        if self.owed <= self.overflow_bytes_max or self.state not in (AWAITING_HELLO, OPEN):
            return []
        return self.fail(errors.SEND_QUEUE_OVERFLOW,
                         f"the connection does not read its replies: more than {self.overflow_bytes_max} bytes "
                         "queued past send_queue_bytes_max (send_queue_overflow_bytes_max)")

    def receive(self, data: bytes, welcome_info: dict[str, Any]) -> tuple[list[ClientMessage], list[Effect]]:
        """Split `data` into messages for the broker, answering protocol errors directly."""
        if self.state == CLOSED:
            return [], []
        decoder = self.decoder
        decoder.push(data)
        out: list[ClientMessage] = []
        effects: list[Effect] = []
        decode = messages.decode_client_message
        for body in decoder.frames():
            if self.state == OPEN:  # the common case, kept short: a request for the broker
                try:
                    msg = decode(body)
                except ProtocolError as exc:
                    reply = messages.error(exc.code, str(exc))
                    effects.append(Send(self.conn, reply))
                    effects += self.charge(len(reply))
                else:
                    if not isinstance(msg, messages.Hello | messages.Auth):
                        out.append(msg)
                        continue
                    effects += self._handshake(msg, welcome_info)
            elif (self.state == AWAITING_HELLO and self.handshake is None
                    and messages.message_type(body) == PEER_HELLO):
                self.state = TRANSITIONS.move(self.state, PEER)
                # the frames behind it, judged by the handshake's limit too (a dialler waits for WELCOME)
                out.append(PeerHandover(body, decoder.take()))
                return out, effects
            else:
                effects += self._before_welcome(body, welcome_info)
            if self.state == CLOSED:
                return out, effects
        failure = self.decoder.failure
        if failure is not None:
            effects += self.fail(failure.code, str(failure))
        return out, effects

    def _before_welcome(self, body: bytes, welcome_info: dict[str, Any]) -> list[Effect]:
        """A frame while the handshake is not done: HELLO or AUTH, else the connection fails."""
        try:
            msg = messages.decode_client_message(body)
        except ProtocolError as exc:
            return self.fail(errors.HANDSHAKE, f"expected HELLO first: {exc}")
        if isinstance(msg, messages.Hello | messages.Auth):
            return self._handshake(msg, welcome_info)
        return self.fail(errors.HANDSHAKE, "expected HELLO first")

    def _handshake(self, msg: messages.Hello | messages.Auth, welcome_info: dict[str, Any]) -> list[Effect]:
        replies = self._hello(msg, welcome_info) if isinstance(msg, messages.Hello) else self._auth(msg, welcome_info)
        return replies + self.charge(sum(len(e.data) for e in replies if type(e) is Send))

    def _hello(self, msg: messages.Hello, welcome_info: dict[str, Any]) -> list[Effect]:
        if self.state == OPEN:
            return [Send(self.conn, messages.error(errors.HANDSHAKE, "HELLO was already received"))]
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
            return self.fail(exc.code, str(exc))
        if isinstance(admitted, ServerHandshake):
            self.handshake = admitted
            ch = admitted.challenge
            return [Send(self.conn, messages.challenge(ch.salt, [ch.kdf.n, ch.kdf.r, ch.kdf.p], ch.server_nonce))]
        return self._open(admitted, welcome_info)

    def _auth(self, msg: messages.Auth, welcome_info: dict[str, Any]) -> list[Effect]:
        """The proof for our challenge: the identity's WELCOME, signed, or a refusal and a close."""
        if self.state == OPEN:
            return [Send(self.conn, messages.error(errors.HANDSHAKE, "AUTH after the handshake"))]
        if self.handshake is None:
            return self.fail(errors.HANDSHAKE, "AUTH without a challenge: send HELLO with a nonce first")
        try:
            principal, signature = self.handshake.finish(msg.proof)
        except TidingsError as exc:
            self.guard.refused(self.handshake.identity.name, exc)
            return self.fail(exc.code, str(exc))
        self.handshake = None
        return self._open(principal, {**welcome_info, "identity": principal.identity,
                                      "server_signature": signature})

    def _open(self, principal: Principal, welcome_info: dict[str, Any]) -> list[Effect]:
        try:
            self.guard.admitted(principal, self)
        except TidingsError as exc:
            return self.fail(exc.code, str(exc))
        self.service = principal.service
        self.instance = principal.instance
        self.identity = principal.identity
        self.state = TRANSITIONS.move(self.state, OPEN)
        self.decoder.limit(self.frame_bytes_max, "frame_bytes_max")
        return [Send(self.conn, messages.welcome(welcome_info))]
