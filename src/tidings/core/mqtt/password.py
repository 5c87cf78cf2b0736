"""The password of an MQTT CONNECT, checked through tidings' own handshake.

Theory of operation. An MQTT client sends its password in its CONNECT; the session speaks tidings'
client handshake on the client's behalf (core/mqtt/session.py), whose CHALLENGE asks for a proof
made from the password's salted key (scrypt: core/auth/credentials.py). That key is dear, so it is
taken from the broker's cache of recent derivations, or asked of the runtime's workers, off the
event loop and bounded per source (core/mqtt/derivations.py), and the answer waits for it. When the
broker's WELCOME says the password was right, the key goes into the cache. `PasswordCheck` holds
that one exchange: the credential, the CHALLENGE waiting for its derivation, and the key to
remember; each step says what the session does next (`Answer`, `Refuse`, or None: wait).
"""

from __future__ import annotations

from dataclasses import dataclass

from tidings.core.auth.credentials import Credential, CredentialError, KdfParams
from tidings.core.errors import ProtocolError
from tidings.core.mqtt.derivations import Derivations
from tidings.core.mqtt.reason_codes import ReasonCode
from tidings.core.session.client_session import ClientSession
from tidings.core.wire import messages

R = ReasonCode


@dataclass(frozen=True, slots=True)
class Answer:
    """The proof to send the broker."""
    frame: bytes


@dataclass(frozen=True, slots=True)
class Refuse:
    """The CONNECT is refused with this reason code."""
    code: ReasonCode
    why: str


Step = Answer | Refuse | None  # None: waiting for the runtime's derivation


class PasswordCheck:
    def __init__(self, conn: int, source: str, derivations: Derivations | None) -> None:
        """`derivations`: where a salted key is asked for (None: derived in the handshake, for tests);
        `source`: the peer's address, which the bound on derivations in flight counts by."""
        self.conn = conn
        self.source = source
        self.derivations = derivations
        self.credential: Credential | None = None
        self.challenge: tuple[int, messages.Challenge] | None = None  # (ticket, CHALLENGE) awaiting its key
        self.derivation: tuple[bytes, bytes] | None = None  # (cache key, salted key) to remember on WELCOME

    def challenged(self, msg: messages.Challenge, native: ClientSession) -> Step:
        """The broker's CHALLENGE: answered at once from the cache, or once the key is derived (the
        CONNECT is refused past the bounds on derivations in flight)."""
        credential, derivations = self.credential, self.derivations
        if credential is None or derivations is None:
            return _answer(msg, None, native)
        try:
            kdf = KdfParams(*msg.kdf).check()
        except (TypeError, CredentialError) as exc:
            return Refuse(R.BAD_USER_NAME_OR_PASSWORD, str(exc))
        key = derivations.cache_key(credential.name, credential.secret, msg.salt, kdf)
        salted = derivations.cached(key)
        if salted is not None:
            return _answer(msg, salted, native)
        ticket = derivations.ask(self.conn, self.source, credential.secret, msg.salt, kdf)
        if ticket is None:
            return Refuse(R.CONNECTION_RATE_EXCEEDED, "too many passwords are being checked: try again later")
        self.challenge = (ticket, msg)
        self.derivation = (key, b"")
        return None

    def derived(self, ticket: int, salted: bytes | None, native: ClientSession) -> Step:
        """The runtime derived the key `ticket` asked for (None: it could not)."""
        pending = self.challenge
        if pending is None or pending[0] != ticket:
            return None
        self.challenge = None
        if salted is None or self.derivation is None:
            return Refuse(R.BAD_USER_NAME_OR_PASSWORD, "the password could not be checked")
        self.derivation = (self.derivation[0], salted)
        return _answer(pending[1], salted, native)

    def welcomed(self) -> None:
        """The broker admitted the client: its password was right, its key worth keeping."""
        if self.derivations is not None and self.derivation is not None:
            self.derivations.remember(*self.derivation)
        self.derivation = None


def _answer(msg: messages.Challenge, salted: bytes | None, native: ClientSession) -> Step:
    try:
        return Answer(native.answer(msg, salted))
    except ProtocolError as exc:
        return Refuse(R.BAD_USER_NAME_OR_PASSWORD, str(exc))
