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

Versions (wire/peer.py). A dialler's PEER_HELLO says the newest version it speaks; the acceptor
welcomes any it speaks, in that version, which the link then speaks (`Link.version`). An older
acceptor refuses any version but its own (`version-mismatch`): the dialler then dials again at
once saying the version before (its queue kept, the peer not reported), so links between versions
speak the older one. The layers above ask `speaks(address, version)` before sending what only a
newer peer understands (a complete NACK). A link lost while OPEN is redialled at the newest again:
the peer may have restarted upgraded.

Loss and reachability. A link that was OPEN and goes down (the connection closed, or nothing heard
for PING_MISSES_MAX ping intervals: rtt.py) is redialled at once; only when that dial fails is the peer
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

Parts. The link and connection records, the outputs and the timer keys are in link.py; the
cluster-credential challenge of a connection is a machine of its own (challenge.py); the checks of
a PEER_HELLO and a PEER_WELCOME, and the reasons a handshake is refused, counted by side and
reason (`refusals`, in the status as `peer_refusals`) and handed to the runtime as `PeerRefused`
effects to log, are in refusals.py; the PING/PONG pinger that measures RTT and notices a silent
peer is rtt.py. `probe` measures a node on request.

Outputs. The entry points driven by inputs, and `handle_timeout`, return one typed list
(`LinkOutput`, link.py): the effects for the runtime first, then the items for the composer, in
order: a `PeerMessage` (sender, message) for each message of another layer (a raw list, which that
layer validates; `reject` answers one it finds malformed), `RttMeasured`, and `PeerUnreachable` for
each peer found unreachable. `send`, `probe`, `flow` and `reject` return effects only.

Invariants: a link's `conn` is set exactly in HANDSHAKE and OPEN; every connection in `_conns`
that is not closing carries the link its `address` names; at most one Connect per address is
outstanding, and a DIALLING link has one (a link that opened the other way meanwhile closes the
connection it brings, unused).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tidings.core import errors
from tidings.core.auth.peer_auth import ClusterAuth
from tidings.core.deadlines import Alarm
from tidings.core.effects import Disconnect, Effect, Send
from tidings.core.errors import ProtocolError
from tidings.core.links.challenge import Challenges
from tidings.core.links.link import (
    DIALLING,
    HANDSHAKE,
    OPEN,
    WAITING,
    AuthTimer,
    Link,
    LinkOutput,
    PeerConfig,
    PeerConn,
    PeerMessage,
)
from tidings.core.links.refusals import (
    ACCEPTOR_SIDE,
    DIALLER_SIDE,
    HANDSHAKE_TIMEOUT,
    MALFORMED,
    Refusal,
    dialler_reading,
    hello_refusal,
    welcome_refusal,
)
from tidings.core.links.rtt import Pinger
from tidings.core.links.table import LinkTable
from tidings.core.overlay.node_id import NodeRef
from tidings.core.wire import messages, peer
from tidings.core.wire.frames import HEADER_BYTES, FrameDecoder
from tidings.core.wire.types import Layer


class PeerLinks(LinkTable):
    def __init__(self, me: NodeRef, config: PeerConfig, cluster: ClusterAuth | None = None,
                 alarm: Alarm | None = None) -> None:
        super().__init__(me, config, alarm)
        self.cluster = cluster  # the cluster credential every peer must prove, if any
        self._challenges = None if cluster is None else Challenges(me, cluster, self.timers,
                                                                   config.handshake_timeout_ns)
        self._pinger = Pinger(self.timers, config.ping_interval_ns)

    # ---- the composer's interface ----------------------------------------------------------------

    def refuse(self, conn: int, code: str, text: str) -> list[Effect]:
        """Close `conn` for breaking one of the broker's limits: PEER_ERROR, and the link it carried dropped."""
        c = self._conns.get(conn)
        if c is None or c.closing:
            return []
        link = self._links.get(c.address)
        return self._close(c, code, text) if link is None else self._fail(c, link, code, text)

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
            link = self._links[address] = Link(address, self.config.version_max)
            out += self._dial(link)
        self._enqueue(link, data)
        return out

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
            link = self._links[address] = Link(address, self.config.version_max)
            return self._dial(link)
        if link.state == OPEN:
            return [self._pinger.ping(now, link)]
        return []

    def connected(self, now: int, conn: int, address: str) -> list[LinkOutput]:
        """Our Connect(address) succeeded as `conn`: say PEER_HELLO, unless no longer needed."""
        self._dialling.discard(address)
        link = self._links.get(address)
        if link is None or link.state != DIALLING:
            return [Disconnect(conn, "a connection to this broker already exists")]
        decoder = FrameDecoder(self.config.hello_frame_bytes_max, "hello_frame_bytes_max", final=False)
        c = self._conns[conn] = PeerConn(conn, decoder, True, address)
        c.nonce = None if self.cluster is None else self.cluster.nonce()
        link.move(HANDSHAKE)
        link.conn = conn
        self._arm(link, now + self.config.handshake_timeout_ns)
        return [Send(conn, peer.hello(self.me, link.version, c.nonce))]

    def connect_failed(self, now: int, address: str, reason: str) -> list[LinkOutput]:
        self._dialling.discard(address)
        link = self._links.get(address)
        if link is not None and link.state == DIALLING:
            self._drop(link, f"cannot connect: {reason}")
        return self._output([], [])

    def adopt(self, now: int, conn: int, decoder: FrameDecoder, hello_body: bytes,
              rest_bodies: list[bytes]) -> list[LinkOutput]:
        """Take over an accepted connection whose first frame is a PEER_HELLO (`hello_body`);
        `rest_bodies` are the frames that came with it, `decoder` holds any partial frame."""
        try:
            hello = peer.decode_hello(hello_body)
        except ProtocolError as exc:  # not yet a peer: answer in the client protocol
            return [Send(conn, messages.error(errors.HANDSHAKE, f"bad PEER_HELLO: {exc}")),
                        self._refused(conn, "", ACCEPTOR_SIDE, MALFORMED, f"bad PEER_HELLO: {exc}"),
                        Disconnect(conn, "bad PEER_HELLO")]
        c = self._conns[conn] = PeerConn(conn, decoder, False, hello.node.address)
        decoder.limit(self.config.hello_frame_bytes_max, "hello_frame_bytes_max", final=False)  # until admitted
        refusal = hello_refusal(hello, self.me, self.cluster is not None, self.config.version_max)
        if refusal is not None:
            return [*self._refuse(c, refusal)]
        if self.cluster is not None:
            return self._challenge(now, c, hello, rest_bodies)
        return self._accepted(now, c, hello, rest_bodies, [])

    def _accepted(self, now: int, c: PeerConn, hello: peer.PeerHello, bodies: Iterable[bytes],
                  out: list[Effect]) -> list[LinkOutput]:
        out += self._accept(now, c, hello)
        if c.closing:
            return self._output([], out)
        msgs = self._bodies(now, c, bodies, out)
        self._check_decoder(c, out)
        return self._output(msgs, out)

    def received(self, now: int, conn: int, data: bytes) -> list[LinkOutput]:
        """Bytes on a peer connection: the messages for other layers, each with its sender."""
        c = self._conns.get(conn)
        if c is None or c.closing:
            return []
        if c.unproven is not None:
            c.decoder.push(data)
            return self._prove(now, c, c.decoder.frames())
        out: list[Effect] = []
        c.decoder.push(data)
        msgs = self._bodies(now, c, c.decoder.frames(), out)
        self._check_decoder(c, out)
        return self._output(msgs, out)

    def lost(self, now: int, conn: int) -> list[LinkOutput]:
        """A peer connection closed. An OPEN link is redialled (the peer is reported unreachable
        only if that fails); a link still in its handshake is dropped and reported at once."""
        c = self._conns.pop(conn, None)
        if c is None or c.closing or c.unproven is not None:
            return []
        link = self._links[c.address]
        assert link.conn == conn
        if link.state == HANDSHAKE:
            self._drop(link, "the connection closed during the handshake")
            return self._output([], [])
        link.version = self.config.version_max  # the peer may come back upgraded: ask for the newest again
        return [*self._redial(link)]

    def reject(self, now: int, address: str, reason: str) -> list[Effect]:
        """Another layer found a message from the peer at `address` malformed: tell the peer and
        close the link (the composer knows, so the peer is not reported unreachable)."""
        link = self._link(address)
        if link is None or link.conn is None:
            return []
        out = self._close(self._conns[link.conn], errors.BAD_MESSAGE, reason)
        self._drop(link, f"sent a malformed message: {reason}", report=False)
        return out

    def handle_timeout(self, now: int) -> list[LinkOutput]:
        out: list[Effect] = []
        for key in self.timers.pop_due(now):
            if isinstance(key, AuthTimer):
                out += self._auth_overdue(key.conn)
            else:
                out += self._wake(now, self._links[key.address])
        return self._output([], out)

    # ---- handshake -------------------------------------------------------------------------------

    def _accept(self, now: int, c: PeerConn, hello: peer.PeerHello) -> list[Effect]:
        """A valid PEER_HELLO on `c`: welcome it in its version, or refuse it after a tie-break."""
        node = hello.node
        link = self._links.get(node.address)
        ours = link is not None and (
            link.state in (DIALLING, HANDSHAKE)
            or (link.state == OPEN and link.conn is not None and self._conns[link.conn].outbound))
        if link is not None and ours and self.me.node_id < node.node_id:
            refused = self._close(c, errors.DUPLICATE_LINK, "both brokers dialled; keeping the dial of "
                                                          "the smaller nodeId")
            if link.state == OPEN:  # the peer may have restarted: a write shows whether ours is dead
                refused.append(self._pinger.ping(now, link))
            return refused
        out: list[Effect] = []
        if link is None:
            link = self._links[node.address] = Link(node.address)
        elif link.conn is not None:
            out += self._close(self._conns[link.conn], errors.DUPLICATE_LINK, "replaced by a newer connection")
        link.node = node
        link.conn = c.conn
        link.version = hello.version  # the dialler's: at most ours (hello_refusal)
        out.append(Send(c.conn, peer.welcome(self.me, hello.version)))
        out += self._open(now, link)
        return out

    def _welcomed(self, now: int, c: PeerConn, link: Link, msg: peer.PeerWelcome) -> list[Effect]:
        refusal = welcome_refusal(msg, self.me, link.address, c.nonce is not None, link.version)
        if refusal is not None:
            return self._refuse_dialled(c, link, refusal)
        link.node = msg.node
        if msg.node.address != link.address and msg.node.address not in self._links:
            self._rename(link, msg.node.address)
        return self._open(now, link)

    def _open(self, now: int, link: Link) -> list[Effect]:
        """The link is usable: flush its queue in order and take a first RTT sample."""
        assert link.conn is not None
        self._conns[link.conn].decoder.limit(self.config.frame_bytes_max, "frame_bytes_max")
        link.move(OPEN)
        link.heard_at = now
        link.blocked = False
        return [*self._flush(link), self._pinger.ping(now, link)]

    # ---- the cluster credential (links/challenge.py) ---------------------------------------------

    def _challenge(self, now: int, c: PeerConn, hello: peer.PeerHello, rest: list[bytes]) -> list[LinkOutput]:
        """An accepted PEER_HELLO in a cluster with a credential: challenge it; no link yet."""
        assert self._challenges is not None
        step = self._challenges.challenge(now, c, hello)
        if isinstance(step, Refusal):
            return [*self._refuse(c, step)]
        return self._prove(now, c, rest, [Send(c.conn, step)])

    def _prove(self, now: int, c: PeerConn, bodies: Iterable[bytes],
               out: list[Effect] | None = None) -> list[LinkOutput]:
        """Frames on an accepted connection not yet proven: only a right PEER_AUTH is acted on."""
        out = out or []
        hello = c.unproven
        assert hello is not None and self._challenges is not None
        frames = iter(bodies)
        for body in frames:
            refusal = self._challenges.verdict(c, body)
            if refusal is not None:
                return [*out, *self._refuse(c, refusal)]
            return self._accepted(now, c, hello, frames, out)
        if c.decoder.failure is not None:
            out += self._refuse(c, Refusal(c.decoder.failure.code, MALFORMED, str(c.decoder.failure)))
        return [*out]

    def _auth_overdue(self, conn: int) -> list[Effect]:
        assert self._challenges is not None
        self._challenges.overdue(conn)
        c = self._conns.get(conn)
        if c is None or c.unproven is None or c.closing:
            return []
        return self._refuse(c, Refusal(errors.HANDSHAKE_TIMEOUT, HANDSHAKE_TIMEOUT,
                                       "no PEER_AUTH within the handshake timeout"))

    # ---- messages --------------------------------------------------------------------------------

    def _bodies(self, now: int, c: PeerConn, bodies: Iterable[bytes], out: list[Effect]) -> list[PeerMessage]:
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
                    msgs.append(PeerMessage(link.node, msg))
                else:
                    raise ProtocolError(errors.UNKNOWN_MESSAGE, f"unknown peer message type {msg[0]}")
            except ProtocolError as exc:
                out += self._fail(c, link, exc.code, str(exc))
            if c.closing:
                break
        return msgs

    def _link_message(self, now: int, c: PeerConn, link: Link, msg: peer.PeerLinkMessage) -> list[Effect]:
        if isinstance(msg, peer.PeerError):
            return self._peer_error(now, c, link, msg)
        if link.state == HANDSHAKE and isinstance(msg, peer.PeerWelcome):
            return self._welcomed(now, c, link, msg)
        if link.state == HANDSHAKE and isinstance(msg, peer.PeerChallenge) and c.nonce is not None:
            assert self._challenges is not None  # a dialler draws a nonce only with a credential
            step = self._challenges.answer(c, link.address, msg)
            return self._refuse_dialled(c, link, step) if isinstance(step, Refusal) else [Send(c.conn, step)]
        if link.state != OPEN or isinstance(msg, peer.PeerHello | peer.PeerWelcome | peer.PeerChallenge
                                                | peer.PeerAuth):
            raise ProtocolError(errors.HANDSHAKE, f"unexpected {type(msg).__name__} in state {link.state}")
        if isinstance(msg, peer.Ping):  # unanswered while blocked: PONGs never pile up unread
            return [] if link.blocked else [Send(c.conn, peer.pong(msg.seq))]
        measured = self._pinger.pong(now, link, msg.seq)
        if measured is not None:
            self._reports.append(measured)
        return []

    def _peer_error(self, now: int, c: PeerConn, link: Link, msg: peer.PeerError) -> list[Effect]:
        c.closing = True
        out: list[Effect] = [Disconnect(c.conn, f"peer error: {msg.code}")]
        if (msg.code == errors.VERSION and link.state == HANDSHAKE and link.conn == c.conn
                and link.version > peer.PEER_VERSION_MIN):
            link.version -= 1  # an older broker, which speaks only its own: say the version before
            return out + self._redial(link)  # (its queue kept: nothing is lost, nobody told)
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

    def _check_decoder(self, c: PeerConn, out: list[Effect]) -> None:
        failure = c.decoder.failure
        if failure is not None and not c.closing:
            out += self._fail(c, self._links[c.address], failure.code, str(failure))

    # ---- queues, timers, failures ----------------------------------------------------------------

    def _wake(self, now: int, link: Link) -> list[Effect]:
        if link.state in (HANDSHAKE, WAITING):
            detail = f"no handshake with {link.address} within handshake_timeout_ns ({link.state})"
            out: list[Effect] = [self._refused(link.conn or 0, link.address, DIALLER_SIDE, HANDSHAKE_TIMEOUT, detail)]
            if link.conn is not None:
                out += self._close(self._conns[link.conn], errors.HANDSHAKE_TIMEOUT,
                                   "no PEER_WELCOME within the handshake timeout")
            self._drop(link, detail)
            return out
        assert link.state == OPEN and link.conn is not None
        if self._pinger.silent(now, link):
            silent = self._conns[link.conn]
            silent.closing = True
            return [Disconnect(silent.conn, "peer silent for too long"), *self._redial(link)]
        return [self._pinger.ping(now, link)]
