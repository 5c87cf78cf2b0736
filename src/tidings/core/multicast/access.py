"""A tree's access list: the creator's subscribe rules, kept at the rendez-vous point and passed
down the tree (Scribe's credentials on create).

Theory of operation. A broker whose auth file has rules creates each tree it joins: its CREATE
names the creator (the identity whose subscription made it join, and the broker's address) and
the tree's access list, the creator broker's subscribe rules that bear on the tree (those whose
pattern shares a channel with the tree's name, itself a pattern: `a/b/c` or `a/#`). Every
subscription pattern that joins tree T matches only channels T matches, so a rule that shares
no channel with T cannot change a decision about it: the list decides exactly as the creator's
own rules would (`admits`, the same `AccessRules` the creator's broker runs for its clients).

The first creator of a tree keeps it: the rendez-vous point takes a later CREATE only from the
broker that created the tree (its SIGHUP reload sends the trees it created again), so a broker
with looser rules cannot rewrite another's list. The list travels with the metadata in REPLICA,
so a new root has it, and down the tree in ACCESS: a node that adopts a child sends it the list
it holds, and a node that receives a new one passes it to its children. A SUBSCRIBE names the
(identity, pattern) pairs its broker joins for (`members`); a node holding a list refuses a
SUBSCRIBE whose members it admits none of, answering ACCESS instead of adopting, and every broker
ends its own subscriptions the list it holds does not admit, with an error to their clients.

`None` is an open tree (no creator with rules): everyone is admitted, as without auth. An empty
list admits nobody (with rules, what no rule allows is denied). Lists and member lists are bounded;
a peer's malformed one is a ProtocolError, decoded before any machine sees it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from tidings.core.auth.names import BROKER_OWN
from tidings.core.auth.rules import SUBSCRIBE, AccessRules, Rule, intersects
from tidings.core.channels import validate_pattern
from tidings.core.errors import ChannelError, ProtocolError
from tidings.core.wire.packable import WireArray
from tidings.core.wire.typed import name

ACL_ENTRIES_MAX = 256  # rules in one tree's access list
MEMBERS_PER_SUBSCRIBE_MAX = 64  # (identity, pattern) pairs one SUBSCRIBE names
IDENTITY_BYTES_MAX = 300
PATTERN_BYTES_MAX = 1100
LISTS_CACHED_MAX = 256  # lists whose decisions are kept (see _rules)

Acl = tuple[Rule, ...]
Member = tuple[str, str]  # (identity, subscription pattern)
Bad = Callable[[str], ProtocolError]


class AclTooLarge(ValueError):
    """The creator's rules bearing on a tree exceed ACL_ENTRIES_MAX."""


def acl_for(rules: AccessRules, tree: str) -> Acl | None:
    """The access list a creator whose rules are `rules` gives `tree`: None when its access
    control is off, else its subscribe rules that share a channel with the tree."""
    if not rules.enabled:
        return None
    acl = tuple(r for r in rules.rules if r.action == SUBSCRIBE and intersects(r.pattern, tree))
    if len(acl) > ACL_ENTRIES_MAX:
        raise AclTooLarge(f"{len(acl)} subscribe rules bear on tree {tree!r} (at most {ACL_ENTRIES_MAX})")
    return acl


def admits(acl: Acl | None, identity: str, pattern: str) -> bool:
    """Whether the list lets `identity` subscribe to `pattern` (a pattern of the list's tree)."""
    if acl is None or identity == BROKER_OWN:  # (a broker's own connection: core/auth/guard.py `vouched`)
        return True
    if not acl:
        return False  # AccessRules([]) is access control off; an empty list is nobody
    return _rules(acl).may_subscribe(identity, pattern)


@functools.lru_cache(maxsize=LISTS_CACHED_MAX)
def _rules(acl: Acl) -> AccessRules:
    """One AccessRules (and its cache of decisions) per list: a broker applies a list to all its
    subscriptions in a tree each time it arrives. A pure function of the list, so its cache changes
    no outcome."""
    return AccessRules(list(acl))


def admitted(acl: Acl | None, members: Sequence[Member]) -> tuple[Member, ...]:
    return tuple(m for m in members if admits(acl, *m))


# ---- wire -----------------------------------------------------------------------------------------

def acl_to_wire(acl: Acl | None) -> WireArray | None:
    return None if acl is None else [[r.identity, r.allow, r.pattern] for r in acl]


def members_to_wire(members: Sequence[Member]) -> list[list[str]]:
    return [[identity, pattern] for identity, pattern in members]


def _pattern(value: object, bad: Bad) -> str:
    text = name(value, PATTERN_BYTES_MAX, "a pattern", bad)
    try:
        return validate_pattern(text)
    except ChannelError as exc:
        raise bad(f"bad pattern: {exc}") from None


def acl_from_wire(value: object, bad: Bad) -> Acl | None:
    if value is None:
        return None
    if type(value) is not list or len(value) > ACL_ENTRIES_MAX:
        raise bad(f"an acl is None or a list of at most {ACL_ENTRIES_MAX} rules")
    acl: list[Rule] = []
    for item in value:
        if type(item) is not list or len(item) != 3 or type(item[1]) is not bool:
            raise bad("an acl rule is [identity, allow, pattern]")
        identity = name(item[0], IDENTITY_BYTES_MAX, "an acl identity", bad)
        acl.append(Rule(identity, SUBSCRIBE, item[1], _pattern(item[2], bad)))
    return tuple(acl)


def members_from_wire(value: object, bad: Bad) -> tuple[Member, ...]:
    if type(value) is not list or len(value) > MEMBERS_PER_SUBSCRIBE_MAX:
        raise bad(f"members is a list of at most {MEMBERS_PER_SUBSCRIBE_MAX} [identity, pattern]")
    members: list[Member] = []
    for item in value:
        if type(item) is not list or len(item) != 2:
            raise bad("a member is [identity, pattern]")
        members.append((name(item[0], IDENTITY_BYTES_MAX, "a member identity", bad), _pattern(item[1], bad)))
    return tuple(members)
