"""Reading and extending the auth file: the I/O half of core/auth/policy.py.

`load_policy` parses the TOML file into an AuthPolicy (AuthFileError names what is wrong).
`add_identity` creates an identity with a fresh secret, appends its verifier to the file (creating
the file, mode 0600, with a fresh cluster secret when it does not exist yet) and returns the
credential, which exists nowhere else: the file keeps only the salted scrypt verifier. Appending
text, rather than rewriting the TOML, keeps the operator's comments and rules as they were; what
is appended is checked as part of the whole file first, so a bad option never leaves a file the
brokers cannot load. `remove_identity` drops an identity's tables and the rules naming it, keeping
every other line, and replaces the file in one rename.
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
from tidings.core.auth.policy import AuthFileError, AuthPolicy, Limits
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
                 kdf: KdfParams | None = None, *, deny_publish: tuple[str, ...] = (),
                 deny_subscribe: tuple[str, ...] = (), limits: dict[str, int] | None = None) -> Credential:
    """A new identity in the auth file at `path`, with allow rules for `publish` and `subscribe`,
    deny rules for `deny_publish` and `deny_subscribe`, and its own `limits` (policy.Limits keys)."""
    check_name(name)
    for pattern in (*publish, *subscribe, *deny_publish, *deny_subscribe):
        validate_pattern(pattern)
    Limits.from_mapping(limits or {}, Limits(), "--limit")
    text, before = "", ""
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
    if exists:
        before = path.read_text(encoding="utf-8")
    else:
        text = f"[cluster]\nsecret = \"{b64(secrets.token_bytes(SECRET_BYTES))}\"\n"
    kdf = kdf or KdfParams()
    credential = Credential(name, secrets.token_bytes(SECRET_BYTES))
    v = make_verifier(credential.secret, secrets.token_bytes(SALT_BYTES), kdf)
    # the key quoted: a '.' in a bare TOML key would make a nested table
    text += (f"\n[identities.\"{name}\"]\nsalt = \"{b64(v.salt)}\"\nscrypt = [{kdf.n}, {kdf.r}, {kdf.p}]\n"
             f"stored_key = \"{b64(v.stored_key)}\"\nserver_key = \"{b64(v.server_key)}\"\n"
             f"instances = {_toml_list(instances or ['*'])}\n")
    if limits:
        text += "limits = { " + ", ".join(f"{k} = {v}" for k, v in limits.items()) + " }\n"
    for verdict, action, patterns in (("allow", "publish", publish), ("allow", "subscribe", subscribe),
                                      ("deny", "publish", deny_publish), ("deny", "subscribe", deny_subscribe)):
        for pattern in patterns:
            text += (f"\n[[rules]]\nidentity = \"{name}\"\n{verdict} = \"{action}\"\n"
                     f"pattern = {_toml_list([pattern])[1:-1]}\n")
    _check(before + text, path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as fh:
        fh.write(text)
    return credential


def _check(text: str, path: Path) -> AuthPolicy:
    """The auth file as it would be: it must load, or nothing is written."""
    try:
        return AuthPolicy.from_mapping(tomllib.loads(text))
    except tomllib.TOMLDecodeError as exc:
        raise AuthFileError(f"auth file {path} would not parse: {exc}") from None
    except AuthFileError as exc:
        raise AuthFileError(f"auth file {path}: {exc}") from None


def _blocks(text: str) -> list[list[str]]:
    """The file's lines in blocks: what comes before the first table header, then each header
    (`[...]` or `[[...]]`) with the lines up to the next one."""
    blocks: list[list[str]] = [[]]
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("["):
            blocks.append([])
        blocks[-1].append(line)
    return blocks


def _names_identity(block: list[str], name: str) -> bool:
    """Whether the block is the identity's table (or a subtable of it) or a rule naming it."""
    header = block[0].strip()
    own = (f"[identities.{name}]", f'[identities."{name}"]')
    if header in own or any(header.startswith(h[:-1] + ".") for h in own):
        return True
    if header.startswith("[[rules]]"):
        try:
            rules = tomllib.loads("".join(block)).get("rules") or [{}]
        except tomllib.TOMLDecodeError:
            return False
        return bool(rules[0].get("identity") == name)
    return False


def remove_identity(path: Path, name: str) -> int:
    """Remove identity `name` and the rules naming it from the auth file at `path`; returns how many
    rules went with it. AuthFileError when the file has no such identity."""
    policy = load_policy(path)
    if name not in policy.identities:
        known = ", ".join(sorted(policy.identities)) or "none"
        raise AuthFileError(f"no identity {name!r} in {path} (its identities: {known})")
    blocks = _blocks(path.read_text(encoding="utf-8"))
    kept = [blocks[0]] + [b for b in blocks[1:] if not _names_identity(b, name)]
    rules_removed = sum(1 for b in blocks[1:] if b[0].strip().startswith("[[rules]]") and _names_identity(b, name))
    text = "".join(line for block in kept for line in block)
    if name in _check(text, path).identities:
        raise AuthFileError(f"cannot remove identity {name!r} from {path}: its table is not one `tidings auth add` "
                            f"writes; edit the file by hand")
    temp = path.with_name(path.name + ".tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    temp.replace(path)
    return rules_removed

