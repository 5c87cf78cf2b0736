"""Access rules: who may publish on, and subscribe to, which channels (deny wins over allow).

A rule names an identity (or `*` for every client, anonymous ones included), an action
(`publish`, `subscribe` or `all`), an effect (allow or deny) and a channel pattern. A client may
publish on channel c when some allow rule for it matches c and no deny rule for it does. A
subscription to pattern P is allowed when every channel P can match is one the client could be
allowed to receive: the allow rules together cover P, and no deny rule shares a single channel with
P (deny wins: a subscription that could deliver one denied channel is refused whole). Without any
rule, access control is off and everything is allowed; with rules, what no rule allows is denied.

Covering and sharing are decided on the patterns' segments, never by enumerating channels (an
infinite set); tests/unit/test_access_rules.py checks both against enumeration over a finite
universe that is exact for the patterns involved. Decisions are cached per (identity, channel or
pattern), bounded, and the cache goes with the rules when they are reloaded.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidings.core.channels import validate_pattern

PUBLISH = "publish"
SUBSCRIBE = "subscribe"
ACTIONS = (PUBLISH, SUBSCRIBE)
ANY_IDENTITY = "*"
DECISIONS_CACHED_MAX = 65_536


@dataclass(frozen=True, slots=True)
class Rule:
    identity: str  # a name, or ANY_IDENTITY
    action: str  # PUBLISH or SUBSCRIBE
    allow: bool
    pattern: str


def _dollar(seg: str) -> bool:
    return seg.startswith("$")


def _wild(seg: str) -> bool:
    return seg in ("+", "#")


def intersects(a: str, b: str) -> bool:
    """True when some channel matches both (valid) patterns."""
    pa, pb = a.split("/"), b.split("/")
    # a wildcard first segment never matches a `$` channel (channels.pattern_matches)
    if (_wild(pa[0]) and _dollar(pb[0])) or (_wild(pb[0]) and _dollar(pa[0])):
        return False
    for i in range(max(len(pa), len(pb))):
        sa = pa[i] if i < len(pa) else None
        sb = pb[i] if i < len(pb) else None
        if sa == "#" or sb == "#":
            return True  # the other's rest (possibly nothing) is matched by `#`
        if sa is None or sb is None:
            return False  # one has ended, the other needs another segment
        if "+" not in (sa, sb) and sa != sb:
            return False
    return True


def covered(pattern: str, allows: list[str]) -> bool:
    """True when every channel `pattern` matches is matched by one of `allows` (valid patterns)."""
    return _covered(pattern.split("/"), [a.split("/") for a in allows], 0)


def _covered(p: list[str], allows: list[list[str]], i: int) -> bool:
    if i == 0 and not _wild(p[0]) and _dollar(p[0]):
        allows = [a for a in allows if not _wild(a[0])]
    if any(i < len(a) and a[i] == "#" for a in allows):
        return True
    if i == len(p):
        return any(len(a) == i for a in allows)
    seg = p[i]
    if seg == "#":  # zero more segments, or one segment of any value and then anything
        # (at the first segment there is no zero-segment channel to cover)
        return ((i == 0 or any(len(a) == i for a in allows))
                and _covered([*p[:i], "+", "#"], allows, i))
    # a segment of any value: a value no allow names needs `+` there (and so do all the others)
    nxt = [a for a in allows if i < len(a) and (a[i] == "+" or (seg != "+" and a[i] == seg))]
    return bool(nxt) and _covered(p, nxt, i + 1)


class AccessRules:
    """The rules of one auth file, with a bounded cache of decisions."""

    def __init__(self, rules: list[Rule]) -> None:
        for r in rules:
            assert r.action in ACTIONS
            validate_pattern(r.pattern)
        self.rules = rules
        self._cache: dict[tuple[str, str, str], bool] = {}

    @property
    def enabled(self) -> bool:
        return bool(self.rules)

    def _applicable(self, identity: str, action: str) -> list[Rule]:
        return [r for r in self.rules if r.action == action and r.identity in (identity, ANY_IDENTITY)]

    def may_publish(self, identity: str, channel: str) -> bool:
        return self._decide(identity, PUBLISH, channel)

    def may_subscribe(self, identity: str, pattern: str) -> bool:
        return self._decide(identity, SUBSCRIBE, pattern)

    def _decide(self, identity: str, action: str, target: str) -> bool:
        if not self.rules:
            return True
        key = (identity, action, target)
        decision = self._cache.get(key)
        if decision is None:
            rules = self._applicable(identity, action)
            if any(not r.allow and intersects(r.pattern, target) for r in rules):
                decision = False
            else:
                decision = covered(target, [r.pattern for r in rules if r.allow])
            if len(self._cache) >= DECISIONS_CACHED_MAX:
                self._cache.clear()
            self._cache[key] = decision
        return decision
