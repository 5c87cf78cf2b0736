"""Credentials and the proofs made with them: SCRAM (RFC 5802) over scrypt, and the cluster proof.

An identity's credential is `NAME:SECRET`, SECRET 32 random bytes in URL-safe base64, shown once
when the operator creates it. The broker keeps only a verifier: a random salt, the scrypt cost
parameters, StoredKey = SHA-256(ClientKey) and ServerKey, where SaltedKey = scrypt(SECRET, salt),
ClientKey = HMAC(SaltedKey, "Client Key"), ServerKey = HMAC(SaltedKey, "Server Key"). scrypt is
the standard library's (OpenSSL's): a salted, deliberately slow hash, so a stolen auth file does
not give the secrets back cheaply; the broker never runs it (only clients do, once per
connection), so a flood of handshakes costs the broker HMACs, not scrypt.

The client proves it knows SECRET without sending it: ClientProof = ClientKey XOR
HMAC(StoredKey, AuthMessage), where AuthMessage binds the identity, the instance, both nonces and
the salt. The broker recomputes HMAC(StoredKey, AuthMessage), recovers ClientKey and checks that
its hash is StoredKey. A verifier alone does not let a thief log in (it lacks ClientKey), a
replayed proof fails because the broker's nonce is new for each connection, and the broker's
reply HMAC(ServerKey, AuthMessage) proves to the client that the broker holds the verifier.

Brokers share one cluster secret and prove it the same way with HMAC-SHA-256 over both nonces and
both nodes (`cluster_proof`), each side with a different role label, so a proof cannot be
reflected back to its maker.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass

from tidings.core.auth.names import check_name
from tidings.core.errors import BAD_CREDENTIAL, TidingsError

SECRET_BYTES = 32
SALT_BYTES = 16
NONCE_BYTES = 24
KEY_BYTES = 32
# scrypt cost: 16 MiB and ~80 ms per derivation on a 2020s core (RFC 7914's interactive setting)
SCRYPT_N = 1 << 14
SCRYPT_R = 8
SCRYPT_P = 1
SCRYPT_N_MAX = 1 << 20  # what a broker may ask a client to spend (and at most 1 GiB of memory)
SCRYPT_MEMORY_BYTES_MAX = 1 << 30



class CredentialError(TidingsError, ValueError):
    code = BAD_CREDENTIAL


@dataclass(frozen=True, slots=True)
class KdfParams:
    n: int = SCRYPT_N
    r: int = SCRYPT_R
    p: int = SCRYPT_P

    def check(self) -> KdfParams:
        n, r, p = self.n, self.r, self.p
        if not (type(n) is int and 2 <= n <= SCRYPT_N_MAX and n & (n - 1) == 0):
            raise CredentialError(f"scrypt n must be a power of two from 2 to {SCRYPT_N_MAX}")
        if not (type(r) is int and type(p) is int and 1 <= r <= 32 and 1 <= p <= 16):
            raise CredentialError("scrypt r must be 1..32 and p 1..16")
        if 128 * n * r * (p + 1) > SCRYPT_MEMORY_BYTES_MAX:
            raise CredentialError("scrypt parameters need too much memory")
        return self


@dataclass(frozen=True, slots=True)
class Verifier:
    """What the broker keeps of an identity's secret."""

    salt: bytes
    kdf: KdfParams
    stored_key: bytes
    server_key: bytes


@dataclass(frozen=True, slots=True)
class Credential:
    """What a client holds: its identity's name and secret."""

    name: str
    secret: bytes

    def __str__(self) -> str:
        return f"{self.name}:{b64(self.secret)}"

    def __repr__(self) -> str:  # never print the secret by accident
        return f"Credential({self.name!r}, <secret>)"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def unb64(text: str, what: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise CredentialError(f"{what} is not URL-safe base64") from None


def parse_credential(text: str) -> Credential:
    """`NAME:SECRET` as `tidings auth add` printed it."""
    name, sep, secret = text.strip().partition(":")
    if not sep:
        raise CredentialError("a credential is NAME:SECRET, as `tidings auth add` printed it")
    raw = unb64(secret, "the credential's secret")
    if len(raw) < 16:
        raise CredentialError("the credential's secret is too short")
    try:
        return Credential(check_name(name, "the credential's name"), raw)
    except TidingsError as exc:
        raise CredentialError(str(exc)) from None


def _hmac(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()


def salted_key(secret: bytes, salt: bytes, kdf: KdfParams) -> bytes:
    kdf.check()
    return hashlib.scrypt(secret, salt=salt, n=kdf.n, r=kdf.r, p=kdf.p, dklen=KEY_BYTES,
                          maxmem=SCRYPT_MEMORY_BYTES_MAX + (1 << 20))


def make_verifier(secret: bytes, salt: bytes, kdf: KdfParams | None = None) -> Verifier:
    kdf = kdf or KdfParams()
    salted = salted_key(secret, salt, kdf)
    return Verifier(salt, kdf, hashlib.sha256(_hmac(salted, b"Client Key")).digest(),
                    _hmac(salted, b"Server Key"))


def client_proof(salted: bytes, auth_message: bytes) -> bytes:
    """The client's proof, from the salted key it derived from its secret."""
    client_key = _hmac(salted, b"Client Key")
    signature = _hmac(hashlib.sha256(client_key).digest(), auth_message)
    return bytes(a ^ b for a, b in zip(client_key, signature, strict=True))


def proof_valid(verifier: Verifier, auth_message: bytes, proof: bytes) -> bool:
    if len(proof) != KEY_BYTES:
        return False
    signature = _hmac(verifier.stored_key, auth_message)
    client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
    return hmac.compare_digest(hashlib.sha256(client_key).digest(), verifier.stored_key)


def server_signature(server_key: bytes, auth_message: bytes) -> bytes:
    return _hmac(server_key, auth_message)


def expected_server_signature(salted: bytes, auth_message: bytes) -> bytes:
    """What the client expects the broker to answer, computed from its own secret."""
    return _hmac(_hmac(salted, b"Server Key"), auth_message)


def signatures_equal(a: bytes, b: bytes) -> bool:
    return hmac.compare_digest(a, b)


def cluster_proof(secret: bytes, role: bytes, *parts: bytes) -> bytes:
    """HMAC-SHA-256 of the cluster secret over a role label and the handshake's fields."""
    data = b"".join(len(p).to_bytes(4, "big") + p for p in (role, *parts))
    return _hmac(secret, data)
