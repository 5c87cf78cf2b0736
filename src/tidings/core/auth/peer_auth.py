"""The cluster credential: brokers prove to each other that they hold the cluster's shared secret.

    dialler                                   acceptor
    PEER_HELLO [.., node, nonce_d]        ->
                                          <-  PEER_CHALLENGE [nonce_a, proof_a]
    PEER_AUTH [proof_d]                   ->
                                          <-  PEER_WELCOME (the handshake of core/links/peer_links.py)

proof_a = HMAC(secret, "acceptor", nonce_d, nonce_a, dialler's NodeRef) and proof_d the same with
"dialler": each side proves the secret over a nonce the other just drew, so a recorded exchange
replays nowhere, and the role labels keep a proof from being reflected to its maker. Until the
acceptor has checked proof_d, the connection is not a link: nothing it carries reaches the overlay
or the trees, no existing link is replaced by it, and it is closed when its deadline passes.
The dialler checks proof_a before it answers, so it never talks to a process that lacks the
secret. Without TLS an attacker on the path can still take over a connection once it is proven;
the credential keeps out every process that is not on the path (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Callable

import msgpack

from tidings.core.auth.credentials import NONCE_BYTES, cluster_proof, signatures_equal
from tidings.core.overlay.node_id import NodeRef

ACCEPTOR = b"acceptor"
DIALLER = b"dialler"


class ClusterAuth:
    def __init__(self, secret: bytes, nonce: Callable[[int], bytes]) -> None:
        assert len(secret) >= 16
        self._secret = secret
        self._nonce = nonce

    def nonce(self) -> bytes:
        return self._nonce(NONCE_BYTES)

    def proof(self, role: bytes, nonce_d: bytes, nonce_a: bytes, dialler: NodeRef) -> bytes:
        return cluster_proof(self._secret, role, nonce_d, nonce_a, bytes(msgpack.packb(dialler.to_wire())))

    def valid(self, proof: bytes, role: bytes, nonce_d: bytes, nonce_a: bytes, dialler: NodeRef) -> bool:
        return signatures_equal(proof, self.proof(role, nonce_d, nonce_a, dialler))
