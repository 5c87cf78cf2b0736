"""The auth file (`tidings broker --auth FILE`, TOML): identities, access rules, limits, cluster secret.

    [cluster]
    secret = "..."                       # shared by every broker of the cluster (URL-safe base64)

    [limits]                             # defaults for every identity; each may override them
    connections_max = 100
    publish_events_per_s = 5000

    [identities.loadmon]                 # PsEPR's service: the name stamped on its events
    salt = "..."; stored_key = "..."; server_key = "..."; scrypt = [16384, 8, 1]
    instances = ["planetlab*"]           # exact names, or a prefix ending in `*`; default ["*"]
    limits = { publish_bytes_per_s = 1000000 }

    [[rules]]                            # see rules.py; `identity = "*"` is every client
    identity = "loadmon"
    allow = "publish"                    # or deny = ...; "publish", "subscribe" or "all"
    pattern = "load/#"

`AuthPolicy.from_mapping` takes the parsed TOML and rejects unknown keys, wrong types and bad
values with a message naming them, so a typo never leaves a door open. Clients that do not
authenticate are the identity `anonymous` (a reserved name) when the broker lets them in.
Identity names follow names.py's rule and are compared by its keys: two identities that read alike
(`LoadMon` beside `loadmon`) are refused, and a rule naming an identity in another spelling
applies to that identity.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from tidings.core.auth.credentials import KdfParams, Verifier, unb64
from tidings.core.auth.names import ANONYMOUS, NameIndex, check_name
from tidings.core.auth.rules import ACTIONS, ANY_IDENTITY, AccessRules, Rule
from tidings.core.channels import validate_pattern
from tidings.core.errors import ChannelError, TidingsError

INSTANCE_CHARS_MAX = 256


class AuthFileError(TidingsError, ValueError):
    code = "bad-auth-file"


@dataclass(frozen=True, slots=True)
class Limits:
    """What one identity may use at one broker; None is unlimited."""

    connections_max: int | None = None
    subscriptions_max: int | None = None
    publish_events_per_s: int | None = None
    publish_bytes_per_s: int | None = None
    publish_burst_s: int = 1  # a bucket holds this many seconds of the rates above

    @classmethod
    def from_mapping(cls, data: Any, base: Limits, where: str) -> Limits:
        if not isinstance(data, Mapping):
            raise AuthFileError(f"{where} must be a table")
        known = {f.name for f in fields(cls)}
        values = {f.name: getattr(base, f.name) for f in fields(cls)}
        for key, value in data.items():
            if key not in known:
                raise AuthFileError(f"unknown key {key!r} in {where}; known keys: {', '.join(sorted(known))}")
            if type(value) is not int or value <= 0:
                raise AuthFileError(f"{where}.{key} must be a positive integer, got {value!r}")
            values[key] = value
        return cls(**values)


@dataclass(frozen=True, slots=True)
class Identity:
    name: str
    verifier: Verifier
    instances: tuple[str, ...] = ("*",)
    limits: Limits = field(default_factory=Limits)

    def allows_instance(self, instance: str) -> bool:
        return any(instance == p or (p.endswith("*") and instance.startswith(p[:-1])) for p in self.instances)


@dataclass(frozen=True, slots=True)
class AuthPolicy:
    identities: dict[str, Identity]
    rules: AccessRules
    cluster_secret: bytes | None
    anonymous: bool  # whether clients that do not authenticate are let in
    anonymous_limits: Limits
    _names: NameIndex = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = NameIndex()
        for name in self.identities:
            names.add(name)
        object.__setattr__(self, "_names", names)

    def reserved_by(self, service: str) -> str | None:
        """The identity (or `anonymous`) that `service` reads as (names.py); None if no one's."""
        return self._names.owner(service)

    @classmethod
    def open(cls) -> AuthPolicy:
        """No auth file: anonymous clients, no rules, no limits, no cluster credential."""
        return cls({}, AccessRules([]), None, True, Limits())

    def limits_of(self, name: str) -> Limits:
        identity = self.identities.get(name)
        return self.anonymous_limits if identity is None else identity.limits

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], anonymous: bool = False) -> AuthPolicy:
        _known(data, {"cluster", "limits", "identities", "rules"}, "the auth file")
        cluster = data.get("cluster", {})
        _known(cluster, {"secret"}, "[cluster]")
        secret = None
        if "secret" in cluster:
            secret = unb64(_str(cluster["secret"], "[cluster] secret"), "[cluster] secret")
            if len(secret) < 16:
                raise AuthFileError("[cluster] secret must hold at least 16 bytes")
        limits = Limits.from_mapping(data.get("limits", {}), Limits(), "[limits]")
        identities = data.get("identities", {})
        if not isinstance(identities, Mapping):
            raise AuthFileError("[identities] must be a table of identities")
        parsed: dict[str, Identity] = {}
        names = NameIndex()
        for name, value in identities.items():
            try:
                check_name(name)
            except TidingsError as exc:
                raise AuthFileError(f"[identities.{name}]: {exc}") from None
            other = names.add(name)
            if other is not None:
                raise AuthFileError(f"[identities.{name}]: reads as {other!r} (names are compared ignoring case "
                                    f"and look-alike characters), " + ("which is reserved for clients that do "
                                    "not authenticate" if other == ANONYMOUS else "another identity of this file"))
            parsed[name] = _identity(name, value, limits)
        rules = data.get("rules", [])
        if not isinstance(rules, list):
            raise AuthFileError("rules must be an array of tables ([[rules]])")
        return cls(parsed, AccessRules([r for i, r in enumerate(rules) for r in _rules(i, r, names)]), secret,
                   anonymous, limits)


def _known(data: Any, keys: set[str], where: str) -> None:
    if not isinstance(data, Mapping):
        raise AuthFileError(f"{where} must be a table")
    for key in data:
        if key not in keys:
            raise AuthFileError(f"unknown key {key!r} in {where}; known keys: {', '.join(sorted(keys))}")


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise AuthFileError(f"{where} must be a string")
    return value


def _identity(name: str, data: Any, limits: Limits) -> Identity:
    where = f"[identities.{name}]"
    _known(data, {"salt", "stored_key", "server_key", "scrypt", "instances", "limits"}, where)
    for key in ("salt", "stored_key", "server_key", "scrypt"):
        if key not in data:
            raise AuthFileError(f"{where} lacks {key!r} (create identities with `tidings auth add`)")
    kdf = data["scrypt"]
    if not (isinstance(kdf, list) and len(kdf) == 3):
        raise AuthFileError(f"{where} scrypt must be [n, r, p]")
    try:
        params = KdfParams(*kdf).check()
    except TidingsError as exc:
        raise AuthFileError(f"{where}: {exc}") from None
    keys = {k: unb64(_str(data[k], f"{where} {k}"), f"{where} {k}") for k in ("salt", "stored_key", "server_key")}
    verifier = Verifier(keys["salt"], params, keys["stored_key"], keys["server_key"])
    instances = data.get("instances", ["*"])
    if (not isinstance(instances, list) or not instances
            or not all(isinstance(i, str) and 0 < len(i) <= INSTANCE_CHARS_MAX for i in instances)):
        raise AuthFileError(f"{where} instances must be a non-empty array of names or prefixes ending in '*'")
    own = Limits.from_mapping(data.get("limits", {}), limits, f"{where} limits")
    return Identity(name, verifier, tuple(instances), own)


def _rules(index: int, data: Any, names: NameIndex) -> list[Rule]:
    """The rules of `data`; an identity written in another spelling is the one of `names` it reads
    as (`anonymous` included), so the rule is not silently left to no one."""
    where = f"rule {index + 1}"
    _known(data, {"identity", "allow", "deny", "pattern"}, where)
    identity = _str(data.get("identity"), f"{where} identity")
    if identity != ANY_IDENTITY:
        try:
            check_name(identity)
        except TidingsError as exc:
            raise AuthFileError(f"{where}: {exc}") from None
        identity = names.owner(identity) or identity
    if ("allow" in data) == ("deny" in data):
        raise AuthFileError(f"{where} needs exactly one of allow = ACTION or deny = ACTION")
    action = _str(data.get("allow", data.get("deny")), f"{where} action")
    if action not in (*ACTIONS, "all"):
        raise AuthFileError(f"{where} action must be publish, subscribe or all, not {action!r}")
    try:
        pattern = validate_pattern(data.get("pattern"))
    except ChannelError as exc:
        raise AuthFileError(f"{where}: {exc}") from None
    actions = ACTIONS if action == "all" else (action,)
    return [Rule(identity, a, "allow" in data, pattern) for a in actions]
