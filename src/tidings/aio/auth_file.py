"""Reading and extending the auth file: the I/O half of core/auth/policy.py.

`load_policy` parses the TOML file into an AuthPolicy (AuthFileError names what is wrong).
`add_identity` creates an identity with a fresh secret, appends its verifier to the file (creating
the file, mode 0600, with a fresh cluster secret when it does not exist yet) and returns the
credential, which exists nowhere else: the file keeps only the salted scrypt verifier. Appending
text, rather than rewriting the TOML, keeps the operator's comments and rules as they were.
"""

from __future__ import annotations

import os
import secrets
import tomllib
from pathlib import Path

from tidings.core.auth.credentials import (
    SALT_BYTES,
    SECRET_BYTES,
    Credential,
    KdfParams,
    b64,
    make_verifier,
)
from tidings.core.auth.names import ANONYMOUS, check_name
from tidings.core.auth.policy import AuthFileError, AuthPolicy
from tidings.core.channels import validate_pattern


def load_policy(path: Path, anonymous: bool = False) -> AuthPolicy:
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise AuthFileError(f"cannot read auth file {path}: {exc}") from None
    try:
        return AuthPolicy.from_mapping(data, anonymous)
    except AuthFileError as exc:
        raise AuthFileError(f"auth file {path}: {exc}") from None


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join('"' + i.replace("\\", "\\\\").replace('"', '\\"') + '"' for i in items) + "]"


def add_identity(path: Path, name: str, instances: list[str], publish: list[str], subscribe: list[str],
                 kdf: KdfParams | None = None) -> Credential:
    """A new identity in the auth file at `path`, with allow rules for the patterns given."""
    check_name(name)
    for pattern in (*publish, *subscribe):
        validate_pattern(pattern)
    text = ""
    exists = path.exists()
    policy = load_policy(path) if exists else AuthPolicy.open()
    owner = policy.reserved_by(name)
    if owner == name:
        raise AuthFileError(f"identity {name!r} already exists in {path}")
    if owner == ANONYMOUS:
        raise AuthFileError(f"{name!r} reads as {ANONYMOUS!r}, reserved for clients that do not authenticate")
    if owner is not None:
        raise AuthFileError(f"{name!r} reads as identity {owner!r} of {path} (names are compared ignoring case "
                            f"and look-alike characters): choose another name")
    if not exists:
        text = f"[cluster]\nsecret = \"{b64(secrets.token_bytes(SECRET_BYTES))}\"\n"
    kdf = kdf or KdfParams()
    credential = Credential(name, secrets.token_bytes(SECRET_BYTES))
    v = make_verifier(credential.secret, secrets.token_bytes(SALT_BYTES), kdf)
    # the key quoted: a '.' in a bare TOML key would make a nested table
    text += (f"\n[identities.\"{name}\"]\nsalt = \"{b64(v.salt)}\"\nscrypt = [{kdf.n}, {kdf.r}, {kdf.p}]\n"
             f"stored_key = \"{b64(v.stored_key)}\"\nserver_key = \"{b64(v.server_key)}\"\n"
             f"instances = {_toml_list(instances or ['*'])}\n")
    for action, patterns in (("publish", publish), ("subscribe", subscribe)):
        for pattern in patterns:
            text += (f"\n[[rules]]\nidentity = \"{name}\"\nallow = \"{action}\"\n"
                     f"pattern = {_toml_list([pattern])[1:-1]}\n")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as fh:
        fh.write(text)
    return credential
