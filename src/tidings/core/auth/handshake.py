"""The client handshake's authentication, both sides, sans-IO (the challenge-response of credentials.py).

    client                                             broker
    HELLO [1, version, NAME, instance, client_nonce]  ->
                                                      <-  CHALLENGE [24, salt, [n, r, p], server_nonce]
    AUTH [6, client_proof]                            ->
                                                      <-  WELCOME (info.server_signature)  or ERROR, close

A HELLO without a nonce asks to be let in anonymously: the broker admits it only when its policy
lets anonymous clients in, and then never under the name of a registered identity, so a source
that names an identity is always that identity. The instance must be one the identity may use.
The nonces are drawn by the runtimes (`secrets`) and handed in, so this module stays deterministic
under test. Every failure is an AuthError whose message says what was wrong without saying which
part of a proof was (an unknown name and a wrong secret read alike to the client).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import msgpack

from tidings.core.auth import credentials as cred
from tidings.core.auth.names import ANONYMOUS
from tidings.core.auth.policy import AuthPolicy
from tidings.core.errors import AUTH_FAILED, AUTH_REQUIRED, TidingsError

NONCE_BYTES_MIN = 16
NONCE_BYTES_MAX = 64


class AuthError(TidingsError):
    code = AUTH_FAILED


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a connection is: the service stamped on its events, its instance, and the identity
    its rules and limits are looked up under (`anonymous` for a client that did not authenticate)."""

    service: str
    instance: str
    identity: str
    authenticated: bool = False  # stamped on every event it publishes (core/event.py)


@dataclass(frozen=True, slots=True)
class Challenge:
    salt: bytes
    kdf: cred.KdfParams
    server_nonce: bytes


def auth_message(name: str, instance: str, client_nonce: bytes, challenge: Challenge) -> bytes:
    """The bytes both sides sign: everything the handshake said, so no part can be swapped."""
    kdf = challenge.kdf
    return bytes(msgpack.packb(["tidings-auth-v1", name, instance, client_nonce, challenge.server_nonce,
                                challenge.salt, [kdf.n, kdf.r, kdf.p]]))


def check_nonce(nonce: bytes, whose: str) -> bytes:
    if not NONCE_BYTES_MIN <= len(nonce) <= NONCE_BYTES_MAX:
        raise AuthError(f"the {whose} nonce must be {NONCE_BYTES_MIN} to {NONCE_BYTES_MAX} bytes", AUTH_FAILED)
    return nonce


def admit_anonymous(policy: AuthPolicy, service: str, instance: str) -> Principal:
    if not policy.anonymous:
        raise AuthError("this broker requires authentication: connect with a credential "
                        "(tidings auth add NAME)", AUTH_REQUIRED)
    owner = policy.reserved_by(service)
    if owner == ANONYMOUS:
        raise AuthError(f"service {service!r} reads as {ANONYMOUS!r}, the name of every client that does not "
                        f"authenticate: choose a service name of your own", AUTH_REQUIRED)
    if owner is not None:
        raise AuthError(f"service {service!r} reads as the registered identity {owner!r} (names are compared "
                        f"ignoring case and look-alike characters): authenticate to publish as it", AUTH_REQUIRED)
    return Principal(service, instance, ANONYMOUS)


class ServerHandshake:
    """The broker's side for one connection, from HELLO with a nonce to the proof's verdict."""

    def __init__(self, policy: AuthPolicy, name: str, instance: str, client_nonce: bytes,
                 server_nonce: Callable[[], bytes]) -> None:
        identity = policy.identities.get(name)
        if not policy.identities:
            raise AuthError("this broker has no identities (it runs without --auth): connect without a credential")
        if identity is None:
            raise AuthError("authentication failed: unknown identity or wrong secret")
        if not identity.allows_instance(instance):
            raise AuthError(f"identity {name!r} may not use instance {instance!r}")
        self.identity = identity
        self.instance = instance
        check_nonce(client_nonce, "client")
        self.challenge = Challenge(identity.verifier.salt, identity.verifier.kdf, server_nonce())
        self._message = auth_message(name, instance, client_nonce, self.challenge)

    def finish(self, proof: bytes) -> tuple[Principal, bytes]:
        """The principal and the broker's signature for WELCOME; AuthError for a wrong proof."""
        verifier = self.identity.verifier
        if not cred.proof_valid(verifier, self._message, proof):
            raise AuthError("authentication failed: unknown identity or wrong secret")
        name = self.identity.name
        return (Principal(name, self.instance, name, authenticated=True),
                cred.server_signature(verifier.server_key, self._message))


class ClientHandshake:
    """The client's side: its credential, its nonce, the proof, and the check of the broker's reply."""

    def __init__(self, credential: cred.Credential, instance: str, client_nonce: bytes) -> None:
        self.credential = credential
        self.instance = instance
        self.client_nonce = check_nonce(client_nonce, "client")
        self._expected: bytes | None = None

    def answer(self, challenge: Challenge, salted: bytes | None = None) -> bytes:
        """The proof for `challenge` (runs scrypt: tens of milliseconds, unless `salted` is the
        salted key already derived for its salt and cost: an MQTT session's, core/mqtt/derivations.py)."""
        try:
            challenge.kdf.check()
        except TidingsError as exc:
            raise AuthError(f"the broker's challenge is unacceptable: {exc}") from None
        check_nonce(challenge.server_nonce, "broker")
        if salted is None:
            salted = cred.salted_key(self.credential.secret, challenge.salt, challenge.kdf)
        message = auth_message(self.credential.name, self.instance, self.client_nonce, challenge)
        self._expected = cred.expected_server_signature(salted, message)
        return cred.client_proof(salted, message)

    def check_welcome(self, signature: object) -> None:
        """The broker proves it holds this identity's verifier (not an impostor's broker)."""
        if (self._expected is None or not isinstance(signature, bytes)
                or not cred.signatures_equal(signature, self._expected)):
            raise AuthError(f"the broker did not prove it knows identity {self.credential.name!r}: its WELCOME "
                            f"signature does not verify (the reply was tampered with in transit, or this is not "
                            f"the broker you meant)")
