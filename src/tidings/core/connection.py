"""The broker's side of one client connection: framing, the handshake, and message decoding.

States: AWAITING_HELLO (until a valid HELLO, or the handshake deadline) -> OPEN -> CLOSED, or
AWAITING_HELLO -> PEER when the first frame is another broker's PEER_HELLO: clients and brokers share
the listening port, and such a connection is handed, with its decoder and the frames that followed
the PEER_HELLO, to the broker's peer links (core/peers.py).
Bytes that break framing (a frame over frame_bytes_max) or the handshake are fatal: an ERROR
frame, then Disconnect. A well-framed but malformed or unknown message is answered with an ERROR
and the connection goes on: the frame boundary is intact, so nothing else is lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tidings.core import errors
from tidings.core.effects import Disconnect, Effect, Send
from tidings.core.errors import ProtocolError
from tidings.core.wire import messages
from tidings.core.wire.frames import FrameDecoder
from tidings.core.wire.peer import PEER_HELLO

AWAITING_HELLO = "awaiting-hello"
OPEN = "open"
CLOSED = "closed"
PEER = "peer"


@dataclass(frozen=True, slots=True)
class PeerHandover:
    """The connection belongs to another broker: its PEER_HELLO and every frame after it."""

    hello: bytes
    rest: list[bytes]


ClientMessage = (
    messages.Publish | messages.Subscribe | messages.Unsubscribe | messages.StatusRequest | PeerHandover
)


class ClientConnection:
    __slots__ = ("blocked", "conn", "decoder", "handshake_deadline", "instance", "service", "state", "subs")

    def __init__(self, conn: int, frame_bytes_max: int, handshake_deadline: int) -> None:
        self.conn = conn
        self.decoder = FrameDecoder(frame_bytes_max)
        self.state = AWAITING_HELLO
        self.handshake_deadline = handshake_deadline
        self.service = ""
        self.instance = ""
        self.blocked = False
        self.subs: dict[int, Any] = {}  # client's subscription id -> Subend

    def fail(self, code: str, message: str) -> list[Effect]:
        self.state = CLOSED
        return [Send(self.conn, messages.error(code, message)), Disconnect(self.conn, message)]

    def receive(self, data: bytes, welcome_info: dict[str, Any]) -> tuple[list[ClientMessage], list[Effect]]:
        """Split `data` into messages for the broker, answering protocol errors directly."""
        if self.state == CLOSED:
            return [], []
        bodies = self.decoder.feed(data)
        out: list[ClientMessage] = []
        effects: list[Effect] = []
        for i, body in enumerate(bodies):
            if self.state == AWAITING_HELLO and messages.message_type(body) == PEER_HELLO:
                self.state = PEER
                out.append(PeerHandover(body, bodies[i + 1:]))
                return out, effects
            try:
                msg = messages.decode_client_message(body)
            except ProtocolError as exc:
                if self.state == AWAITING_HELLO:
                    effects += self.fail(errors.HANDSHAKE, f"expected HELLO first: {exc}")
                    return out, effects
                effects.append(Send(self.conn, messages.error(exc.code, str(exc))))
                continue
            if isinstance(msg, messages.Hello):
                effects += self._hello(msg, welcome_info)
                if self.state == CLOSED:
                    return out, effects
            elif self.state == AWAITING_HELLO:
                effects += self.fail(errors.HANDSHAKE, "expected HELLO first")
                return out, effects
            else:
                out.append(msg)
        failure = self.decoder.failure
        if failure is not None:
            effects += self.fail(failure.code, str(failure))
        return out, effects

    def _hello(self, msg: messages.Hello, welcome_info: dict[str, Any]) -> list[Effect]:
        if self.state == OPEN:
            return [Send(self.conn, messages.error(errors.HANDSHAKE, "HELLO was already received"))]
        if msg.version != messages.PROTOCOL_VERSION:
            return self.fail(errors.VERSION, f"protocol version {msg.version} is not supported; "
                                             f"this broker speaks {messages.PROTOCOL_VERSION}")
        if not msg.service or len(msg.service) > 256 or len(msg.instance) > 256:
            return self.fail(errors.HANDSHAKE, "service must be 1 to 256 characters, instance at most 256")
        self.service = msg.service
        self.instance = msg.instance
        self.state = OPEN
        return [Send(self.conn, messages.welcome(welcome_info))]
