"""Links between brokers: one TCP connection per pair, its handshake, its queue, and its RTT.

Theory of operation. The overlay and the layers above it name peers by address (Pastry's
send(msg, node)); `PeerLinks` turns that into connections. A link to an address goes (`LinkState`,
each move checked against `TRANSITIONS`)

    DIALLING  -> HANDSHAKE -> OPEN        we dial: Connect, then PEER_HELLO, until PEER_WELCOME
                 (adopted)  -> OPEN        the peer dials: the broker hands us its PEER_HELLO
    HANDSHAKE -> WAITING   -> OPEN        our dial lost a tie-break; the peer's dial comes to us

Messages for a link that is not OPEN, or whose connection is blocked (the runtime's send buffer
passed its high-water mark: SendBlocked), wait in its queue (at most peer_queue_bytes_max; past
that they are dropped and counted), and are flushed in order, one frame each, when it opens or
drains. So a slow or stalled peer costs bounded memory. Every
input's Sends to one connection leave as one write (effects.coalesce_sends joins them).

One connection per pair. When both brokers dial each other at once, each sees its own dial and
the other's PEER_HELLO; both keep the connection dialled by the smaller nodeId, which needs no
further exchange: the broker with the smaller id refuses the other's HELLO (PEER_ERROR
duplicate-link, the dialler then WAITs for our dial), the one with the larger id welcomes it and
closes its own dial. Queues belong to the link, not the connection, so closing a dial loses
nothing. A HELLO over a link that is already OPEN means the peer has lost the old connection (it
restarted): the new one replaces the old, unless the old is ours and we have the smaller id (then
it may be a tie-break in flight: we refuse, and ping over ours, so that a dead one shows itself).

Loss and reachability. A link that was OPEN and goes down (the connection closed, or nothing heard
for PING_MISSES_MAX ping intervals) is redialled at once; only when that dial fails is the peer
reported unreachable, the signal the composer passes to the overlay as peer_unreachable. So a
dropped connection to a live broker costs a reconnect, not a repair, while a killed broker refuses
the redial and is reported within one connect attempt. A failed dial, a handshake timeout, a
PEER_ERROR from the peer, or garbage on the link also drop the queue and report the peer.

Memory. Until a connection's handshake is done (PEER_HELLO, PEER_CHALLENGE, PEER_AUTH,
PEER_WELCOME) its frames are at most hello_frame_bytes_max long; an admitted peer's, frame_bytes_max.
A PING is answered only while the link's connection is not blocked (a peer that does not read its
PONGs gets no more of them); every other message waits in the bounded queue, so nothing a peer
sends makes this broker queue unbounded replies. The broker charges each connection's partial frame
to its budget and progress deadline (wire/frames.py PartialFrames) and closes one that breaks them
with `refuse`.

Cluster credential. With a ClusterAuth (auth/peer_auth.py) an accepted PEER_HELLO is first
challenged: the connection is kept apart from the links (`unproven`, under the handshake timeout)
and only a right PEER_AUTH hands its HELLO to the handshake above; until then nothing it carries
is acted on and no link is touched. A dialler answers the acceptor's PEER_CHALLENGE only if the
acceptor proved the secret, and takes no PEER_WELCOME before that.

Refusals. Every handshake that ends without a link, at either end, is counted by side and reason
(`refusals`, in the status as `peer_refusals`) and handed to the runtime as a `PeerRefused` effect
to log: as acceptor, a HELLO that is malformed, of another version, announcing an address that is
not HOST:PORT, without the cluster credential's nonce (`missing-credential`) or with one where
there is no credential (`unexpected-credential`), a wrong PEER_AUTH or a dialler that refused our
proof (`bad-proof`: the secrets differ), no PEER_AUTH in time, or too many handshakes at once; as
dialler, the acceptor's PEER_ERROR, a challenge whose proof fails, a WELCOME without a challenge,
or no WELCOME in time. The acceptor's PEER_ERROR says why, and the dialler reads it against its
own state: `auth-failed` to a dialler without a credential means the acceptor requires one;
before its challenge, that the acceptor has none; after it, that our proof was refused.

RTT. An OPEN link sends PING at once and then every ping_interval_ns; the matching PONG gives
`RttMeasured` (both ends of the measure are `now` values) for proximity neighbour selection.
`probe` measures a node on request.

Outputs. The entry points driven by inputs return `(items, effects)`: effects for the runtime, and
items for the composer, in order: `(sender, message)` for each message of another layer (a raw
list, which that layer validates; `reject` answers one it finds malformed), `RttMeasured`, and a
plain `str` address for each peer found unreachable. `send`, `probe`, `flow` and `reject` return
effects.

Invariants: a link's `conn` is set exactly in HANDSHAKE and OPEN; every connection in `_conns`
that is not closing carries the link its `address` names; at most one Connect per address is
outstanding, and a DIALLING link has one (a link that opened the other way meanwhile closes the
connection it brings, unused).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple

from tidings.core import defaults, errors
from tidings.core.auth.peer_auth import ACCEPTOR, DIALLER, ClusterAuth
from tidings.core.deadlines import Deadlines
from tidings.core.effects import Connect, Disconnect, Effect, PeerRefused, Send
from tidings.core.errors import AUTH_FAILED, ProtocolError
from tidings.core.links.refusals import (
    ACCEPTOR_SIDE,
    BAD_ADDRESS,
    BAD_PROOF,
    BUSY,
    DIALLER_SIDE,
    HANDSHAKE_TIMEOUT,
    MALFORMED,
    MISSING_CREDENTIAL,
    UNEXPECTED_CREDENTIAL,
    VERSION,
    dialler_reading,
    valid_address,
)
from tidings.core.overlay.node_id import NodeRef, id_hex
from tidings.core.states import Transitions
from tidings.core.wire import messages, peer
from tidings.core.wire.frames import HEADER_BYTES, FrameDecoder
from tidings.core.wire.types import Layer, LinkType


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

PING_MISSES_MAX = 3  # an OPEN link silent for this many ping intervals is down
ALIASES_MAX = 1024
UNPROVEN_MAX = 256  # accepted connections awaiting PEER_AUTH at once; more are refused


@dataclass(frozen=True, slots=True)
class PeerConfig:
    """The limits of the peer links (BrokerConfig.peer_config() fills them from the broker's)."""

    frame_bytes_max: int = defaults.FRAME_BYTES_MAX
    hello_frame_bytes_max: int = defaults.HELLO_FRAME_BYTES_MAX  # frames before the handshake is done
    handshake_timeout_ns: int = defaults.HANDSHAKE_TIMEOUT_NS
    # per link, while it is not open; beyond, messages are dropped
    peer_queue_bytes_max: int = defaults.PEER_QUEUE_BYTES_MAX
    ping_interval_ns: int = defaults.PING_INTERVAL_NS


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


PeerMessage = tuple[NodeRef, list[Any]]
PeerItem = PeerMessage | RttMeasured | str  # a str is the address of a peer found unreachable
PeerOutput = tuple[list[PeerItem], list[Effect]]


class _Conn:
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


class _Link:
    __slots__ = ("address", "blocked", "conn", "dropped", "heard_at", "node",
                 "ping_sent_at", "ping_seq", "queue", "queued_bytes", "received", "rtt_ns", "sent", "state")

    def __init__(self, address: str) -> None:
        self.address = address
        self.state: LinkState = DIALLING
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


class PeerLinks:
    def __init__(self, me: NodeRef, config: PeerConfig, cluster: ClusterAuth | None = None) -> None:
        self.me = me
        self.config = config
        self.cluster = cluster  # the cluster credential every peer must prove, if any
        self._unproven: dict[int, None] = {}  # connections challenged within the handshake timeout
        self._links: dict[str, _Link] = {}
        self._conns: dict[int, _Conn] = {}
        self._dialling: set[str] = set()  # addresses with a Connect outstanding
        self._aliases: dict[str, str] = {}  # dialled address -> the address the peer advertises
        # a link's one live timer (its handshake deadline or its next ping), and each challenged
        # connection's PEER_AUTH deadline
        self.timers: Deadlines[LinkTimer | AuthTimer] = Deadlines()
        self._reports: list[RttMeasured | str] = []  # handed out with the next output
        self._ping_seq = 0
        self.messages_dropped = 0  # on every link, also those since forgotten
        self.last_failure = ""  # the last link dropped and why, for status and logs
        self.refusals: dict[tuple[str, str], int] = {}  # (side, reason) -> handshakes refused

    # ---- the composer's interface ----------------------------------------------------------------

    def owns(self, conn: int) -> bool:
        return conn in self._conns

    def held_bytes(self, conn: int) -> int:
        """The bytes `conn` holds in a partial frame (0 once it is closing)."""
        c = self._conns.get(conn)
        return 0 if c is None or c.closing else c.decoder.held_bytes

    def refuse(self, conn: int, code: str, text: str) -> list[Effect]:
        """Close `conn` for breaking one of the broker's limits: PEER_ERROR, and the link it carried dropped."""
        c = self._conns.get(conn)
        if c is None or c.closing:
            return []
        link = self._links.get(c.address)
        return self._close(c, code, text) if link is None else self._fail(c, link, code, text)

    def address_of(self, conn: int) -> str | None:
        """The peer a connection of ours leads to (as far as its handshake has told)."""
        c = self._conns.get(conn)
        return None if c is None else c.address

    def send(self, now: int, address: str, message: list[Any]) -> list[Effect]:
        """Send one message to the broker at `address`, dialling it first if need be."""
        assert address != self.me.address, "a broker does not send to itself"
        data = peer.encode(message)
        assert len(data) - HEADER_BYTES <= self.config.frame_bytes_max, "peer message over frame_bytes_max"
        link = self._link(address)
        if link is not None and link.state == OPEN and not link.blocked:
            assert link.conn is not None
            link.sent += 1
            return [Send(link.conn, data)]
        out: list[Effect] = []
        if link is None:
            link = self._links[address] = _Link(address)
            out.append(self._dial(link))
        self._enqueue(link, data)
        return out

    def congested(self, address: str) -> bool:
        """The link to `address` is OPEN but its connection's send buffer is past its high-water
        mark: what is sent to it now waits in its bounded queue (and past that is dropped)."""
        link = self._link(address)
        return link is not None and link.state == OPEN and link.blocked

    def flow(self, now: int, conn: int, blocked: bool) -> list[Effect]:
        """The runtime's send buffer for `conn` passed its high-water mark (SendBlocked, `blocked`)
        or fell back under its low one (SendDrained): hold messages back, or send those held."""
        c = self._conns.get(conn)
        if c is None or c.closing or c.unproven is not None:
            return []
        link = self._links[c.address]
        link.blocked = blocked
        if blocked or link.state != OPEN:
            return []
        return self._flush(link)

    def probe(self, now: int, address: str) -> list[Effect]:
        """Measure the RTT to `address`: ping now if linked, else dial (an opening link pings)."""
        link = self._link(address)
        if link is None:
            link = self._links[address] = _Link(address)
            return [self._dial(link)]
        if link.state == OPEN:
            return [self._ping(now, link)]
        return []

    def connected(self, now: int, conn: int, address: str) -> PeerOutput:
        """Our Connect(address) succeeded as `conn`: say PEER_HELLO, unless no longer needed."""
        self._dialling.discard(address)
        link = self._links.get(address)
        if link is None or link.state != DIALLING:
            return [], [Disconnect(conn, "a connection to this broker already exists")]
        decoder = FrameDecoder(self.config.hello_frame_bytes_max, "hello_frame_bytes_max", final=False)
        c = self._conns[conn] = _Conn(conn, decoder, True, address)
        c.nonce = None if self.cluster is None else self.cluster.nonce()
        link.move(HANDSHAKE)
        link.conn = conn
        self._arm(link, now + self.config.handshake_timeout_ns)
        return [], [Send(conn, peer.hello(self.me, nonce=c.nonce))]

    def connect_failed(self, now: int, address: str, reason: str) -> PeerOutput:
        self._dialling.discard(address)
        link = self._links.get(address)
        if link is not None and link.state == DIALLING:
            self._drop(link, f"cannot connect: {reason}")
        return self._output([], [])

    def adopt(self, now: int, conn: int, decoder: FrameDecoder, hello_body: bytes,
              rest_bodies: list[bytes]) -> PeerOutput:
        """Take over an accepted connection whose first frame is a PEER_HELLO (`hello_body`);
        `rest_bodies` are the frames that came with it, `decoder` holds any partial frame."""
        try:
            hello = peer.decode_hello(hello_body)
        except ProtocolError as exc:  # not yet a peer: answer in the client protocol
            return [], [Send(conn, messages.error(errors.HANDSHAKE, f"bad PEER_HELLO: {exc}")),
                        self._refused(conn, "", ACCEPTOR_SIDE, MALFORMED, f"bad PEER_HELLO: {exc}"),
                        Disconnect(conn, "bad PEER_HELLO")]
        c = self._conns[conn] = _Conn(conn, decoder, False, hello.node.address)
        decoder.limit(self.config.hello_frame_bytes_max, "hello_frame_bytes_max", final=False)  # until admitted
        refusal = self._hello_refusal(hello)
        if refusal is not None:
            return [], self._refuse(c, *refusal)
        if self.cluster is not None:
            return self._challenge(now, c, hello, rest_bodies)
        return self._accepted(now, c, hello.node, rest_bodies, [])

    def _hello_refusal(self, hello: peer.PeerHello) -> tuple[str, str, str] | None:
        """Why a well-formed PEER_HELLO is refused before any credential is checked (the PEER_ERROR
        code, the refusal reason, the text), or None."""
        if hello.version != peer.PEER_VERSION:
            return (errors.VERSION, VERSION, f"peer protocol version {hello.version} is not supported; this "
                                             f"broker speaks {peer.PEER_VERSION}")
        if not valid_address(hello.node.address):
            return errors.HANDSHAKE, BAD_ADDRESS, f"PEER_HELLO announces {hello.node.address!r}, not HOST:PORT"
        if hello.node.node_id == self.me.node_id or hello.node.address == self.me.address:
            return errors.HANDSHAKE, MALFORMED, "PEER_HELLO names this very broker"
        if self.cluster is None and hello.nonce is not None:
            return AUTH_FAILED, UNEXPECTED_CREDENTIAL, "this broker has no cluster credential (PEER_HELLO with nonce)"
        return None

    def _accepted(self, now: int, c: _Conn, node: NodeRef, bodies: Iterable[bytes], out: list[Effect]) -> PeerOutput:
        out += self._accept(now, c, node)
        if c.closing:
            return self._output([], out)
        msgs = self._bodies(now, c, bodies, out)
        self._check_decoder(c, out)
        return self._output(msgs, out)

    def received(self, now: int, conn: int, data: bytes) -> PeerOutput:
        """Bytes on a peer connection: the messages for other layers, each with its sender."""
        c = self._conns.get(conn)
        if c is None or c.closing:
            return [], []
        if c.unproven is not None:
            c.decoder.push(data)
            return self._prove(now, c, c.decoder.frames())
        out: list[Effect] = []
        c.decoder.push(data)
        msgs = self._bodies(now, c, c.decoder.frames(), out)
        self._check_decoder(c, out)
        return self._output(msgs, out)

    def lost(self, now: int, conn: int) -> PeerOutput:
        """A peer connection closed. An OPEN link is redialled (the peer is reported unreachable
        only if that fails); a link still in its handshake is dropped and reported at once."""
        c = self._conns.pop(conn, None)
        if c is None or c.closing or c.unproven is not None:
            return [], []
        link = self._links[c.address]
        assert link.conn == conn
        if link.state == HANDSHAKE:
            self._drop(link, "the connection closed during the handshake")
            return self._output([], [])
        return [], self._redial(link)

    def reject(self, now: int, address: str, reason: str) -> list[Effect]:
        """Another layer found a message from the peer at `address` malformed: tell the peer and
        close the link (the composer knows, so the peer is not reported unreachable)."""
        link = self._link(address)
        if link is None or link.conn is None:
            return []
        out = self._close(self._conns[link.conn], errors.BAD_MESSAGE, reason)
        self._drop(link, f"sent a malformed message: {reason}", report=False)
        return out

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def handle_timeout(self, now: int) -> PeerOutput:
        out: list[Effect] = []
        for key in self.timers.pop_due(now):
            if isinstance(key, AuthTimer):
                out += self._auth_overdue(key.conn)
            else:
                out += self._wake(now, self._links[key.address])
        return self._output([], out)

    def status(self) -> list[dict[str, Any]]:
        return [{"address": link.address,
                 "node_id": None if link.node is None else id_hex(link.node.node_id),
                 "state": link.state,
                 "rtt_ms": None if link.rtt_ns is None else round(link.rtt_ns / 1e6, 3),
                 "queued_bytes": link.queued_bytes,
                 "sent": link.sent,
                 "received": link.received,
                 "dropped": link.dropped}
                for link in sorted(self._links.values(), key=lambda lk: lk.address)]

    def refusals_status(self) -> dict[str, dict[str, int]]:
        """Handshakes refused since start, by side (ACCEPTOR_SIDE, DIALLER_SIDE) and reason."""
        out: dict[str, dict[str, int]] = {ACCEPTOR_SIDE: {}, DIALLER_SIDE: {}}
        for (side, reason), count in sorted(self.refusals.items()):
            out[side][reason] = count
        return out

    # ---- handshake -------------------------------------------------------------------------------

    def _accept(self, now: int, c: _Conn, node: NodeRef) -> list[Effect]:
        """A valid PEER_HELLO from `node` on `c`: welcome it, or refuse it after a tie-break."""
        link = self._links.get(node.address)
        ours = link is not None and (
            link.state in (DIALLING, HANDSHAKE)
            or (link.state == OPEN and link.conn is not None and self._conns[link.conn].outbound))
        if link is not None and ours and self.me.node_id < node.node_id:
            refused = self._close(c, errors.DUPLICATE_LINK, "both brokers dialled; keeping the dial of "
                                                          "the smaller nodeId")
            if link.state == OPEN:  # the peer may have restarted: a write shows whether ours is dead
                refused.append(self._ping(now, link))
            return refused
        out: list[Effect] = []
        if link is None:
            link = self._links[node.address] = _Link(node.address)
        elif link.conn is not None:
            out += self._close(self._conns[link.conn], errors.DUPLICATE_LINK, "replaced by a newer connection")
        link.node = node
        link.conn = c.conn
        out.append(Send(c.conn, peer.welcome(self.me)))
        out += self._open(now, link)
        return out

    def _welcomed(self, now: int, c: _Conn, link: _Link, msg: peer.PeerWelcome) -> list[Effect]:
        if c.nonce is not None:
            return self._refuse_dialled(c, link, AUTH_FAILED, UNEXPECTED_CREDENTIAL,
                                        f"{link.address} has no cluster credential (it welcomed us without "
                                        f"proving one)")
        if msg.version != peer.PEER_VERSION:
            return self._refuse_dialled(c, link, errors.VERSION, VERSION,
                                        f"{link.address} speaks peer protocol version {msg.version}, "
                                        f"not {peer.PEER_VERSION}")
        if not valid_address(msg.node.address):
            return self._refuse_dialled(c, link, errors.HANDSHAKE, BAD_ADDRESS,
                                        f"{link.address} announces {msg.node.address!r}, not HOST:PORT")
        if msg.node.node_id == self.me.node_id:
            return self._refuse_dialled(c, link, errors.HANDSHAKE, MALFORMED,
                                        f"{link.address}'s PEER_WELCOME names this very broker")
        link.node = msg.node
        if msg.node.address != link.address and msg.node.address not in self._links:
            self._rename(link, msg.node.address)
        return self._open(now, link)

    def _open(self, now: int, link: _Link) -> list[Effect]:
        """The link is usable: flush its queue in order and take a first RTT sample."""
        assert link.conn is not None
        self._conns[link.conn].decoder.limit(self.config.frame_bytes_max, "frame_bytes_max")
        link.move(OPEN)
        link.heard_at = now
        link.blocked = False
        return [*self._flush(link), self._ping(now, link)]

    def _flush(self, link: _Link) -> list[Effect]:
        conn = link.conn
        assert conn is not None
        out: list[Effect] = [Send(conn, data) for data in link.queue]
        link.sent += len(link.queue)
        link.queue = []
        link.queued_bytes = 0
        return out

    def _rename(self, link: _Link, address: str) -> None:
        """The peer advertises another address than the one we dialled: key the link by the
        advertised one (the address others know it by), and remember the dialled one as an alias."""
        old = link.address
        del self._links[old]
        if len(self._aliases) >= ALIASES_MAX:
            self._aliases.clear()
        self._aliases[link.address] = address
        link.address = address
        self._links[address] = link
        if link.conn is not None:
            self._conns[link.conn].address = address
        when = self.timers.when(LinkTimer(old))
        if when is not None:
            self.timers.cancel(LinkTimer(old))
            self.timers.set(LinkTimer(address), when)

    # ---- the cluster credential (auth/peer_auth.py) ------------------------------------------------

    def _challenge(self, now: int, c: _Conn, hello: peer.PeerHello, rest: list[bytes]) -> PeerOutput:
        """An accepted PEER_HELLO in a cluster with a credential: challenge it; no link yet."""
        assert self.cluster is not None
        if hello.nonce is None:
            return [], self._refuse(c, AUTH_FAILED, MISSING_CREDENTIAL,
                                    "this cluster requires its credential (PEER_HELLO without nonce)")
        if len(self._unproven) >= UNPROVEN_MAX:
            return [], self._refuse(c, errors.HANDSHAKE, BUSY, "too many peer handshakes in progress")
        c.unproven = hello
        c.nonce = self.cluster.nonce()
        self._unproven[c.conn] = None
        self.timers.set(AuthTimer(c.conn), now + self.config.handshake_timeout_ns)
        proof = self.cluster.proof(ACCEPTOR, hello.nonce, c.nonce, hello.node)
        return self._prove(now, c, rest, [Send(c.conn, peer.challenge(c.nonce, proof))])

    def _prove(self, now: int, c: _Conn, bodies: Iterable[bytes], out: list[Effect] | None = None) -> PeerOutput:
        """Frames on an accepted connection not yet proven: only a right PEER_AUTH is acted on."""
        out = out or []
        hello = c.unproven
        assert hello is not None and hello.nonce is not None and c.nonce is not None and self.cluster is not None
        frames = iter(bodies)
        for body in frames:
            try:
                raw = peer.unpack(body)
                msg = peer.decode_link_message(raw) if raw[0] in (LinkType.PEER_AUTH, LinkType.PEER_ERROR) else None
            except ProtocolError as exc:
                return [], out + self._refuse(c, exc.code, MALFORMED, str(exc))
            if isinstance(msg, peer.PeerError):  # the dialler checked our proof and refused it, or gave up
                reason = BAD_PROOF if msg.code == AUTH_FAILED else MALFORMED
                why = "refused this broker's cluster proof: the secrets differ" if reason == BAD_PROOF else "gave up"
                return [], out + self._refuse(c, msg.code, reason, f"the dialler {why} ({msg.message})", tell=False)
            if not isinstance(msg, peer.PeerAuth):
                return [], out + self._refuse(c, errors.HANDSHAKE, MALFORMED, "expected PEER_AUTH")
            if not self.cluster.valid(msg.proof, DIALLER, hello.nonce, c.nonce, hello.node):
                return [], out + self._refuse(c, AUTH_FAILED, BAD_PROOF, "wrong cluster credential")
            c.unproven = None
            return self._accepted(now, c, hello.node, frames, out)
        if c.decoder.failure is not None:
            out += self._refuse(c, c.decoder.failure.code, MALFORMED, str(c.decoder.failure))
        return [], out

    def _answer(self, c: _Conn, link: _Link, msg: peer.PeerChallenge) -> list[Effect]:
        """The acceptor proved the cluster credential: prove it back (then PEER_WELCOME comes)."""
        assert self.cluster is not None and c.nonce is not None
        if not self.cluster.valid(msg.proof, ACCEPTOR, c.nonce, msg.nonce, self.me):
            return self._refuse_dialled(c, link, AUTH_FAILED, BAD_PROOF,
                                        f"{link.address} holds another cluster credential (its proof does not "
                                        f"verify with ours)")
        proof = self.cluster.proof(DIALLER, c.nonce, msg.nonce, self.me)
        c.nonce = None
        return [Send(c.conn, peer.auth(proof))]

    def _auth_overdue(self, conn: int) -> list[Effect]:
        del self._unproven[conn]
        c = self._conns.get(conn)
        if c is None or c.unproven is None or c.closing:
            return []
        return self._refuse(c, errors.HANDSHAKE_TIMEOUT, HANDSHAKE_TIMEOUT, "no PEER_AUTH within the handshake timeout")

    # ---- messages --------------------------------------------------------------------------------

    def _bodies(self, now: int, c: _Conn, bodies: Iterable[bytes], out: list[Effect]) -> list[PeerMessage]:
        """Handle each frame on `c` in order; stop at the first that closes the link."""
        msgs: list[PeerMessage] = []
        link = self._links[c.address]
        link.heard_at = now
        for body in bodies:
            try:
                msg = peer.unpack(body)
                if msg[0] in Layer.LINK:
                    out += self._link_message(now, c, link, peer.decode_link_message(msg))
                elif link.state != OPEN:
                    raise ProtocolError(errors.HANDSHAKE, "expected PEER_WELCOME first")
                elif (msg[0] in Layer.OVERLAY or msg[0] in Layer.MULTICAST or msg[0] in Layer.BROKER
                      or msg[0] in Layer.RELIABILITY):
                    assert link.node is not None
                    link.received += 1
                    msgs.append((link.node, msg))
                else:
                    raise ProtocolError(errors.UNKNOWN_MESSAGE, f"unknown peer message type {msg[0]}")
            except ProtocolError as exc:
                out += self._fail(c, link, exc.code, str(exc))
            if c.closing:
                break
        return msgs

    def _link_message(self, now: int, c: _Conn, link: _Link, msg: peer.PeerLinkMessage) -> list[Effect]:
        if isinstance(msg, peer.PeerError):
            return self._peer_error(now, c, link, msg)
        if link.state == HANDSHAKE and isinstance(msg, peer.PeerWelcome):
            return self._welcomed(now, c, link, msg)
        if link.state == HANDSHAKE and isinstance(msg, peer.PeerChallenge) and c.nonce is not None:
            return self._answer(c, link, msg)
        if link.state != OPEN or isinstance(msg, peer.PeerHello | peer.PeerWelcome | peer.PeerChallenge
                                                | peer.PeerAuth):
            raise ProtocolError(errors.HANDSHAKE, f"unexpected {type(msg).__name__} in state {link.state}")
        if isinstance(msg, peer.Ping):  # unanswered while blocked: PONGs never pile up unread
            return [] if link.blocked else [Send(c.conn, peer.pong(msg.seq))]
        if msg.seq == link.ping_seq:
            link.rtt_ns = now - link.ping_sent_at
            self._reports.append(RttMeasured(link.address, link.rtt_ns))
        return []

    def _peer_error(self, now: int, c: _Conn, link: _Link, msg: peer.PeerError) -> list[Effect]:
        c.closing = True
        out: list[Effect] = [Disconnect(c.conn, f"peer error: {msg.code}")]
        if msg.code != errors.DUPLICATE_LINK and link.state == HANDSHAKE and link.conn == c.conn:
            reason, detail = dialler_reading(msg.code, msg.message, link.address, self.cluster is not None,
                                             challenged=c.nonce is None)
            out.insert(0, self._refused(c.conn, link.address, DIALLER_SIDE, reason, detail))  # then Disconnect
            self._drop(link, detail)
        elif msg.code != errors.DUPLICATE_LINK:
            self._drop(link, f"peer error {msg.code}: {msg.message}")
        elif link.state == HANDSHAKE:
            link.move(WAITING)  # the peer keeps its own dial to us: wait for its HELLO
            link.conn = None
            self._arm(link, now + self.config.handshake_timeout_ns)
        else:  # the peer closed an open link as superseded: it is alive, so connect afresh
            out += self._redial(link)
        return out

    def _check_decoder(self, c: _Conn, out: list[Effect]) -> None:
        failure = c.decoder.failure
        if failure is not None and not c.closing:
            out += self._fail(c, self._links[c.address], failure.code, str(failure))

    # ---- queues, timers, failures ----------------------------------------------------------------

    def _link(self, address: str) -> _Link | None:
        return self._links.get(self._aliases.get(address, address))

    def _dial(self, link: _Link) -> Connect:
        assert link.address not in self._dialling
        link.move(DIALLING)
        self.timers.cancel(LinkTimer(link.address))
        self._dialling.add(link.address)
        return Connect(link.address)

    def _redial(self, link: _Link) -> list[Effect]:
        link.conn = None
        if link.address in self._dialling:  # a dial of ours is still out: it takes over
            link.move(DIALLING)
            self.timers.cancel(LinkTimer(link.address))
            return []
        return [self._dial(link)]

    def _enqueue(self, link: _Link, data: bytes) -> None:
        if link.queued_bytes + len(data) > self.config.peer_queue_bytes_max:
            link.dropped += 1
            self.messages_dropped += 1
            return
        link.queue.append(data)
        link.queued_bytes += len(data)

    def _ping(self, now: int, link: _Link) -> Send:
        assert link.conn is not None
        self._ping_seq += 1
        link.ping_seq = self._ping_seq
        link.ping_sent_at = now
        self._arm(link, now + self.config.ping_interval_ns)
        return Send(link.conn, peer.ping(link.ping_seq))

    def _arm(self, link: _Link, when: int) -> None:
        self.timers.set(LinkTimer(link.address), when)

    def _wake(self, now: int, link: _Link) -> list[Effect]:
        if link.state in (HANDSHAKE, WAITING):
            detail = f"no handshake with {link.address} within handshake_timeout_ns ({link.state})"
            out: list[Effect] = [self._refused(link.conn or 0, link.address, DIALLER_SIDE, HANDSHAKE_TIMEOUT, detail)]
            if link.conn is not None:
                out += self._close(self._conns[link.conn], errors.HANDSHAKE_TIMEOUT,
                                   "no PEER_WELCOME within the handshake timeout")
            self._drop(link, detail)
            return out
        assert link.state == OPEN and link.conn is not None
        if now - link.heard_at >= PING_MISSES_MAX * self.config.ping_interval_ns:
            silent = self._conns[link.conn]
            silent.closing = True
            return [Disconnect(silent.conn, "peer silent for too long"), *self._redial(link)]
        return [self._ping(now, link)]

    def _close(self, c: _Conn, code: str, text: str) -> list[Effect]:
        c.closing = True
        c.decoder.clear()  # nothing more is read
        return [Send(c.conn, peer.peer_error(code, text)), Disconnect(c.conn, text)]

    def _refused(self, conn: int, address: str, side: str, reason: str, detail: str) -> PeerRefused:
        """Count one refused handshake; the effect tells the runtime, which logs it."""
        key = (side, reason)
        self.refusals[key] = self.refusals.get(key, 0) + 1
        return PeerRefused(conn, address, side, reason, detail)

    def _refuse(self, c: _Conn, code: str, reason: str, text: str, tell: bool = True) -> list[Effect]:
        """Refuse the connection `c` that dialled us: count and report it, tell the dialler why
        (unless it told us first: `tell`), and close."""
        refused = self._refused(c.conn, c.address, ACCEPTOR_SIDE, reason, text)
        self.last_failure = f"{c.address}: refused ({reason}): {text}"
        c.closing = True
        c.decoder.clear()  # nothing more is read
        # each list: what the dialler is told, the refusal for the runtime, the close
        return [*([Send(c.conn, peer.peer_error(code, text))] if tell else []), refused, Disconnect(c.conn, text)]

    def _refuse_dialled(self, c: _Conn, link: _Link, code: str, reason: str, detail: str) -> list[Effect]:
        """The broker we dialled failed our check in the handshake: count, report, close, drop."""
        send, close = self._close(c, code, detail)
        refused = self._refused(c.conn, link.address, DIALLER_SIDE, reason, detail)
        if link.conn == c.conn:
            self._drop(link, detail)
        return [send, refused, close]

    def _fail(self, c: _Conn, link: _Link, code: str, text: str) -> list[Effect]:
        """`c` broke the protocol: tell the peer, close, and drop the link if `c` carried it."""
        out = self._close(c, code, text)
        if link.conn == c.conn:
            self._drop(link, f"protocol error ({code}): {text}")
        return out

    def _drop(self, link: _Link, reason: str, report: bool = True) -> None:
        """Forget the link and its queue, and report its peer unreachable."""
        del self._links[link.address]
        self.timers.cancel(LinkTimer(link.address))
        self.messages_dropped += len(link.queue)
        self.last_failure = f"{link.address}: {reason}"
        if report:
            self._reports.append(link.address)

    def _output(self, msgs: list[PeerMessage], effects: list[Effect]) -> PeerOutput:
        items: list[PeerItem] = [*msgs, *self._reports]
        self._reports = []
        return items, effects
