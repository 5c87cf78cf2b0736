"""Why a peer handshake ended without a link: the vocabulary both ends count and log it in
(core/links/peer_links.py: `refusals`, the runtime's PeerRefused log lines, `tidings_peer_refusals_total`),
the checks of a PEER_HELLO and a PEER_WELCOME, and how a dialler reads the acceptor's PEER_ERROR.

Every handshake that ends without a link, at either end, is counted by side and reason and handed
to the runtime as a `PeerRefused` effect to log: as acceptor, a HELLO that is malformed, of another
version, announcing an address that is not HOST:PORT, without the cluster credential's nonce
(`missing-credential`) or with one where there is no credential (`unexpected-credential`), a wrong
PEER_AUTH or a dialler that refused our proof (`bad-proof`: the secrets differ), no PEER_AUTH in
time, or too many handshakes at once; as dialler, the acceptor's PEER_ERROR, a challenge whose
proof fails, a WELCOME without a challenge, or no WELCOME in time. A `Refusal` is what a check
decides: the PEER_ERROR code the other end is told (unless it told us first), the reason, the text.

The acceptor's PEER_ERROR code alone does not say what a dialler must fix: `auth-failed` is the
answer both to a HELLO without the cluster credential's nonce and to a wrong PEER_AUTH. The dialler
knows what it sent, so it reads the code against that: without a credential of its own, the
acceptor requires one; with one, refused before any PEER_CHALLENGE, the acceptor has none; after
answering the challenge, our proof was refused.
"""

from __future__ import annotations

from typing import NamedTuple

from tidings.core import errors
from tidings.core.errors import AUTH_FAILED
from tidings.core.overlay.node_id import NodeRef
from tidings.core.wire import peer

ACCEPTOR_SIDE = "acceptor"  # this broker refused a connection that dialled it
DIALLER_SIDE = "dialler"  # the broker this one dialled refused it, or failed its check
# why a handshake ended without a link (the `reason` of PeerRefused and of the refusal counts)
MISSING_CREDENTIAL = "missing-credential"  # the dialler has no cluster credential, the acceptor does
UNEXPECTED_CREDENTIAL = "unexpected-credential"  # the dialler has one, the acceptor none
BAD_PROOF = "bad-proof"  # a cluster proof did not verify: the two hold different secrets
HANDSHAKE_TIMEOUT = "handshake-timeout"
BAD_ADDRESS = "bad-address"  # the announced address is not HOST:PORT
VERSION = "version"
MALFORMED = "malformed"  # a bad or unexpected frame in the handshake
BUSY = "busy"  # UNPROVEN_MAX handshakes in progress already
REFUSED = "refused"  # the acceptor's PEER_ERROR with another code
REFUSAL_REASONS = (MISSING_CREDENTIAL, UNEXPECTED_CREDENTIAL, BAD_PROOF, HANDSHAKE_TIMEOUT, BAD_ADDRESS, VERSION,
                   MALFORMED, BUSY, REFUSED)


class Refusal(NamedTuple):
    """A handshake ends here: PEER_ERROR `code` (sent unless `tell` is False: the peer told us
    first), counted and logged under `reason`, with `text`."""

    code: str
    reason: str
    text: str
    tell: bool = True


HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:[]")
PORT_MAX = 65535


def valid_address(address: str) -> bool:
    """HOST:PORT as a broker announces itself: a host of letters, digits, `.-_` (or a bracketed
    IPv6 address) and a port from 1 to 65535."""
    host, sep, port = address.rpartition(":")
    return (bool(sep) and bool(host) and set(host) <= HOST_CHARS and port.isascii() and port.isdigit()
            and 0 < int(port) <= PORT_MAX)


def dialler_reading(code: str, message: str, address: str, has_credential: bool, challenged: bool) -> tuple[str, str]:
    """The reason and the sentence for the PEER_ERROR `code` (`message`) with which the broker at
    `address` ended our handshake, given whether we hold a cluster credential and whether it had
    challenged us (we answered its PEER_CHALLENGE)."""
    if code == AUTH_FAILED and not has_credential:
        return MISSING_CREDENTIAL, f"{address} requires a cluster credential"
    if code == AUTH_FAILED and not challenged:
        return UNEXPECTED_CREDENTIAL, f"{address} has no cluster credential (this broker has one)"
    if code == AUTH_FAILED:
        return BAD_PROOF, f"cluster credential refused by {address}"
    if code == errors.HANDSHAKE_TIMEOUT:
        return HANDSHAKE_TIMEOUT, f"{address} timed out our handshake ({message})"
    if code == errors.VERSION:
        return VERSION, f"{address}: {message}"
    return REFUSED, f"{address} refused the link ({code}: {message})"


def hello_refusal(hello: peer.PeerHello, me: NodeRef, has_credential: bool,
                  version_max: int = peer.PEER_VERSION) -> Refusal | None:
    """Why a well-formed PEER_HELLO is refused before any credential is checked, or None (of a
    version this broker speaks, PEER_VERSION_MIN to `version_max`: the link speaks the dialler's)."""
    if not peer.PEER_VERSION_MIN <= hello.version <= version_max:
        return Refusal(errors.VERSION, VERSION, f"peer protocol version {hello.version} is not supported; this "
                                                f"broker speaks {peer.PEER_VERSION_MIN} to {version_max}")
    if not valid_address(hello.node.address):
        return Refusal(errors.HANDSHAKE, BAD_ADDRESS, f"PEER_HELLO announces {hello.node.address!r}, not HOST:PORT")
    if hello.node.node_id == me.node_id or hello.node.address == me.address:
        return Refusal(errors.HANDSHAKE, MALFORMED, "PEER_HELLO names this very broker")
    if not has_credential and hello.nonce is not None:
        return Refusal(AUTH_FAILED, UNEXPECTED_CREDENTIAL,
                       "this broker has no cluster credential (PEER_HELLO with nonce)")
    return None


def welcome_refusal(msg: peer.PeerWelcome, me: NodeRef, address: str, awaiting_challenge: bool,
                    version: int = peer.PEER_VERSION) -> Refusal | None:
    """Why the PEER_WELCOME of the broker we dialled at `address` is refused, or None;
    `awaiting_challenge`: we hold a credential and it has not yet proved its own; `version`: what
    our PEER_HELLO said, which the welcome must say too."""
    if awaiting_challenge:
        return Refusal(AUTH_FAILED, UNEXPECTED_CREDENTIAL,
                       f"{address} has no cluster credential (it welcomed us without proving one)")
    if msg.version != version:
        return Refusal(errors.VERSION, VERSION,
                       f"{address} speaks peer protocol version {msg.version}, not {version}")
    if not valid_address(msg.node.address):
        return Refusal(errors.HANDSHAKE, BAD_ADDRESS, f"{address} announces {msg.node.address!r}, not HOST:PORT")
    if msg.node.node_id == me.node_id:
        return Refusal(errors.HANDSHAKE, MALFORMED, f"{address}'s PEER_WELCOME names this very broker")
    return None
