"""One link to another broker and one connection under it, as `PeerLinks` (peer_links.py) holds them.

Theory of operation. A `Link` is keyed by the peer's address and outlives its connections: its
state (`LinkState`, each move checked against `TRANSITIONS`), the node it turned out to be, the
connection that carries it now (`conn`, set exactly in HANDSHAKE and OPEN), its bounded queue of
frames waiting for the link to open or drain (at most `peer_queue_bytes_max`; past that a frame is
dropped and counted), its counters and its RTT. A `PeerConn` is one TCP connection of ours to a
peer, dialled or accepted: its frame decoder, which link it carries, whether we already closed it,
and what the cluster credential's challenge holds for it (links/challenge.py).

The outputs of PeerLinks are typed here too (`LinkOutput`): effects for the runtime, then, for the
composer, in order, each message of another layer with its sender (`PeerMessage`), each RTT sample
(`RttMeasured`) and each peer found unreachable (`PeerUnreachable`); and the two timer keys the
links arm.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple

from tidings.core import defaults
from tidings.core.effects import Effect
from tidings.core.overlay.node_id import NodeRef, id_hex
from tidings.core.states import Transitions
from tidings.core.wire import peer
from tidings.core.wire.frames import FrameDecoder


class LinkState(StrEnum):
    DIALLING = "dialling"
    HANDSHAKE = "handshake"
    WAITING = "waiting"
    OPEN = "open"


DIALLING, HANDSHAKE, WAITING, OPEN = LinkState
# a link is redialled from any state but DIALLING's own; OPEN -> OPEN is a newer connection replacing
# the link's (the peer restarted); DIALLING -> OPEN is the peer's dial accepted while ours was out
TRANSITIONS = Transitions[LinkState]("peer link", {
    DIALLING: frozenset({DIALLING, HANDSHAKE, OPEN}),
    HANDSHAKE: frozenset({WAITING, OPEN, DIALLING}),
    WAITING: frozenset({OPEN, DIALLING}),
    OPEN: frozenset({OPEN, DIALLING}),
})


@dataclass(frozen=True, slots=True)
class PeerConfig:
    """The limits of the peer links (BrokerConfig.peer_config() fills them from the broker's)."""

    frame_bytes_max: int = defaults.FRAME_BYTES_MAX
    hello_frame_bytes_max: int = defaults.HELLO_FRAME_BYTES_MAX  # frames before the handshake is done
    handshake_timeout_ns: int = defaults.HANDSHAKE_TIMEOUT_NS
    # per link, while it is not open; beyond, messages are dropped
    peer_queue_bytes_max: int = defaults.PEER_QUEUE_BYTES_MAX
    ping_interval_ns: int = defaults.PING_INTERVAL_NS
    # the newest peer protocol version spoken (wire/peer.py "Versions"): below PEER_VERSION only to
    # play a broker of an older version, in tests of mixed versions
    version_max: int = peer.PEER_VERSION


class LinkTimer(NamedTuple):
    """The link to `address` is due: its handshake deadline passed, or it pings."""

    address: str


class AuthTimer(NamedTuple):
    """The accepted connection `conn` owes PEER_AUTH by now."""

    conn: int


@dataclass(frozen=True, slots=True)
class RttMeasured:
    address: str
    rtt_ns: int


@dataclass(frozen=True, slots=True)
class PeerUnreachable:
    """The peer at `address` cannot be reached: its link is dropped (the overlay's peer_unreachable)."""

    address: str


@dataclass(frozen=True, slots=True)
class PeerMessage:
    """A message of another layer from `sender`: the decoded frame, which that layer validates."""

    sender: NodeRef
    message: list[Any]  # raw msgpack, as the peer codec decoded it (wire/peer.py unpack)


PeerItem = PeerMessage | RttMeasured | PeerUnreachable
# what every entry point of PeerLinks driven by an input or a timer returns: the runtime's effects
# first, then the items for the composer, in order
LinkOutput = Effect | PeerItem


class PeerConn:
    __slots__ = ("address", "closing", "conn", "decoder", "nonce", "outbound", "unproven")

    def __init__(self, conn: int, decoder: FrameDecoder, outbound: bool, address: str) -> None:
        self.conn = conn
        self.decoder = decoder
        self.outbound = outbound
        self.address = address  # the link it carries
        self.closing = False  # we sent Disconnect: whatever still arrives is ignored
        # with a cluster credential (auth/peer_auth.py): the nonce this end drew (a dialler's stays
        # until the acceptor proved itself), and an accepted connection's HELLO until PEER_AUTH
        self.nonce: bytes | None = None
        self.unproven: peer.PeerHello | None = None


class Link:
    __slots__ = ("address", "blocked", "conn", "dropped", "heard_at", "node",
                 "ping_sent_at", "ping_seq", "queue", "queued_bytes", "received", "rtt_ns", "sent", "state", "version")

    def __init__(self, address: str, version: int = peer.PEER_VERSION) -> None:
        self.address = address
        self.state: LinkState = DIALLING
        # the peer protocol version (wire/peer.py "Versions"): while dialling, what our PEER_HELLO says
        # (lower after an older acceptor refused a newer one); once OPEN, what the link speaks
        self.version = version
        self.node: NodeRef | None = None
        self.conn: int | None = None
        self.blocked = False  # OPEN, but its connection's send buffer is full: queue meanwhile
        self.queue: list[bytes] = []
        self.queued_bytes = 0
        self.sent = 0  # messages of other layers written to the link, received from it, dropped
        self.received = 0
        self.dropped = 0
        self.heard_at = 0  # OPEN: when the peer last sent anything
        self.ping_seq = -1
        self.ping_sent_at = 0
        self.rtt_ns: int | None = None

    def move(self, state: LinkState) -> None:
        self.state = TRANSITIONS.move(self.state, state)

    def enqueue(self, data: bytes, queue_bytes_max: int) -> bool:
        """Queue one frame until the link opens or drains; False (and counted) when it does not fit."""
        if self.queued_bytes + len(data) > queue_bytes_max:
            self.dropped += 1
            return False
        self.queue.append(data)
        self.queued_bytes += len(data)
        return True

    def take_queue(self) -> list[bytes]:
        """The queued frames, in order, counted as sent; the queue is empty after."""
        frames = self.queue
        self.sent += len(frames)
        self.queue = []
        self.queued_bytes = 0
        return frames

    def status(self) -> dict[str, Any]:
        return {"address": self.address,
                "node_id": None if self.node is None else id_hex(self.node.node_id),
                "state": self.state,
                "version": self.version,
                "rtt_ms": None if self.rtt_ns is None else round(self.rtt_ns / 1e6, 3),
                "queued_bytes": self.queued_bytes,
                "sent": self.sent,
                "received": self.received,
                "dropped": self.dropped}
