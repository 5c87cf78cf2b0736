"""The cluster credential on a peer connection: the challenge of an accepted PEER_HELLO and the
dialler's answer (the proofs themselves: auth/peer_auth.py).

Theory of operation. With a ClusterAuth, an accepted PEER_HELLO is first challenged: the
connection is kept apart from the links (`PeerConn.unproven` holds its HELLO, under an
`AuthTimer` of handshake_timeout_ns) and only a right PEER_AUTH hands that HELLO to the handshake
(links/peer_links.py); until then nothing it carries is acted on and no link is touched. At most
UNPROVEN_MAX connections wait so at once; more are refused `busy`. A dialler answers the
acceptor's PEER_CHALLENGE only if the acceptor proved the secret, and takes no PEER_WELCOME before
that (its `PeerConn.nonce` stays set until it answered).

Each step returns what the links do next: a frame to send, or a `Refusal` (links/refusals.py),
which the links count, log and close the connection with. The machine holds no connection of its
own: the per-connection state lives in the `PeerConn`, the set of those waiting here in
`_unproven` (an entry stays until its AuthTimer fires, proven or not, so the bound counts the
handshakes of the last timeout).
"""

from __future__ import annotations

from tidings.core import errors
from tidings.core.auth.peer_auth import ACCEPTOR, DIALLER, ClusterAuth
from tidings.core.deadlines import Deadlines
from tidings.core.errors import AUTH_FAILED, ProtocolError
from tidings.core.links.link import AuthTimer, LinkTimer, PeerConn
from tidings.core.links.refusals import BAD_PROOF, BUSY, MALFORMED, MISSING_CREDENTIAL, Refusal
from tidings.core.overlay.node_id import NodeRef
from tidings.core.wire import peer
from tidings.core.wire.types import LinkType

UNPROVEN_MAX = 256  # accepted connections awaiting PEER_AUTH at once; more are refused


class Challenges:
    def __init__(self, me: NodeRef, cluster: ClusterAuth, timers: Deadlines[LinkTimer | AuthTimer],
                 timeout_ns: int) -> None:
        self._me = me
        self.cluster = cluster
        self._timers = timers  # the links' own: one clock for every handshake deadline
        self._timeout_ns = timeout_ns
        self._unproven: dict[int, None] = {}  # connections challenged within the handshake timeout

    def challenge(self, now: int, c: PeerConn, hello: peer.PeerHello) -> bytes | Refusal:
        """An accepted PEER_HELLO on `c`: the PEER_CHALLENGE frame to send, or why it is refused."""
        if hello.nonce is None:
            return Refusal(AUTH_FAILED, MISSING_CREDENTIAL,
                           "this cluster requires its credential (PEER_HELLO without nonce)")
        if len(self._unproven) >= UNPROVEN_MAX:
            return Refusal(errors.HANDSHAKE, BUSY, "too many peer handshakes in progress")
        c.unproven = hello
        c.nonce = self.cluster.nonce()
        self._unproven[c.conn] = None
        self._timers.set(AuthTimer(c.conn), now + self._timeout_ns)
        proof = self.cluster.proof(ACCEPTOR, hello.nonce, c.nonce, hello.node)
        return peer.challenge(c.nonce, proof)

    def verdict(self, c: PeerConn, body: bytes) -> Refusal | None:
        """The next frame `body` on the challenged `c`: None when it is the right PEER_AUTH (`c` is
        proven: its HELLO goes to the handshake), else why `c` is refused."""
        hello = c.unproven
        assert hello is not None and hello.nonce is not None and c.nonce is not None
        try:
            raw = peer.unpack(body)
            msg = peer.decode_link_message(raw) if raw[0] in (LinkType.PEER_AUTH, LinkType.PEER_ERROR) else None
        except ProtocolError as exc:
            return Refusal(exc.code, MALFORMED, str(exc))
        if isinstance(msg, peer.PeerError):  # the dialler checked our proof and refused it, or gave up
            reason = BAD_PROOF if msg.code == AUTH_FAILED else MALFORMED
            why = "refused this broker's cluster proof: the secrets differ" if reason == BAD_PROOF else "gave up"
            return Refusal(msg.code, reason, f"the dialler {why} ({msg.message})", tell=False)
        if not isinstance(msg, peer.PeerAuth):
            return Refusal(errors.HANDSHAKE, MALFORMED, "expected PEER_AUTH")
        if not self.cluster.valid(msg.proof, DIALLER, hello.nonce, c.nonce, hello.node):
            return Refusal(AUTH_FAILED, BAD_PROOF, "wrong cluster credential")
        c.unproven = None
        return None

    def answer(self, c: PeerConn, address: str, msg: peer.PeerChallenge) -> bytes | Refusal:
        """The PEER_CHALLENGE of the broker we dialled at `address`: our PEER_AUTH frame if it
        proved the credential (then PEER_WELCOME comes), else why we refuse it."""
        assert c.nonce is not None
        if not self.cluster.valid(msg.proof, ACCEPTOR, c.nonce, msg.nonce, self._me):
            return Refusal(AUTH_FAILED, BAD_PROOF,
                           f"{address} holds another cluster credential (its proof does not verify with ours)")
        proof = self.cluster.proof(DIALLER, c.nonce, msg.nonce, self._me)
        c.nonce = None
        return peer.auth(proof)

    def overdue(self, conn: int) -> None:
        """`conn`'s AuthTimer fired: it no longer counts against UNPROVEN_MAX."""
        del self._unproven[conn]
