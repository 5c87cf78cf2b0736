"""The trees this broker joins for its local subscriptions, under the trees' access lists
(Scribe §2.2 with access.py's lists).

Theory of operation. Each subscription that is not bounded joins one tree, its pattern's
(trees.py); `TreeMemberships` (core/subscription/memberships.py) counts the members and says when
the broker joins a tree (its first local member) and leaves it (its last, away durable
registrations counting). This machine adds what the access lists ask of those moves and returns
them as typed effects for the composer to carry out through the cluster member:

- `JoinTree`: the first member. With rules, the broker creates the trees it joins first: the
  CREATE names the member's identity as creator and carries the access list the guard's rules give
  the tree (`Guard.creation`; None: an open tree). The SUBSCRIBE names the member.
- `NameMembers`: the (identity, pattern) pairs the broker's SUBSCRIBE names for a tree it is in
  changed. A SUBSCRIBE names at most MEMBERS_PER_SUBSCRIBE_MAX of them, and a root holding a list
  refuses a SUBSCRIBE whose members it admits none of; so a pair is named while a local
  subscription stands for it, and no longer once the last one has gone (`gone`); the pairs that
  still stand, in the order they joined, take its place under the bound (Scribe keeps those it
  names already).
- `LeaveTree`: the last member is gone.

Before a SUBSCRIBE is taken, `refusal` says whether the list this broker holds for the pattern's
tree (`AccessLists`, Scribe's) excludes it; when a tree's list reaches this broker
(`AccessChanged`), `excluded` says which of its subscriptions there the list does not admit: the
composer ends each with a `forbidden` error to its client. The guard words and counts both
refusals.

Invariant: `named[tree]` counts, for each pair, the subscriptions in `TreeMemberships.tree_of` on
`tree` standing for it; a pair with none is not there, and a tree with no pair is not there.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from tidings.core.auth.guard import Guard
from tidings.core.errors import TidingsError
from tidings.core.multicast.access import MEMBERS_PER_SUBSCRIBE_MAX, Acl, Member, admits
from tidings.core.multicast.trees import subscription_tree
from tidings.core.subscription.memberships import TreeMemberships


class AccessLists(Protocol):
    """The trees' access lists this node holds (core/multicast/agent.py ScribeAgent)."""

    def admits(self, tree: str, identity: str, pattern: str) -> bool | None: ...

    def creator(self, tree: str) -> str: ...

    def admits_everywhere(self, identity: str) -> bool: ...

    def created(self) -> list[tuple[str, str]]: ...


class JoinTree(NamedTuple):
    """Join `tree` for `members`; with `creation` (creator, access list), CREATE it first."""

    tree: str
    members: tuple[Member, ...]
    creation: tuple[str, Acl | None] | None


class NameMembers(NamedTuple):
    """The broker's SUBSCRIBE to `tree` names `members` (at most MEMBERS_PER_SUBSCRIBE_MAX, those
    already named kept), and no longer `gone`."""

    tree: str
    gone: Member | None
    members: tuple[Member, ...]


class LeaveTree(NamedTuple):
    tree: str


class CreateTree(NamedTuple):
    """CREATE `tree` again, as `creator`, with access list `acl` (the guard's rules were reloaded)."""

    tree: str
    creator: str
    acl: Acl | None


TreeEffect = JoinTree | NameMembers | LeaveTree


class LocalTrees:
    __slots__ = ("_member_of", "guard", "lists", "memberships", "named")

    def __init__(self, guard: Guard, memberships: TreeMemberships) -> None:
        self.guard = guard
        self.memberships = memberships
        self.lists: AccessLists | None = None  # in an overlay: the lists this node holds (`start`)
        self.named: dict[str, dict[Member, int]] = {}  # tree -> pair -> its subscriptions, in the order named
        self._member_of: dict[int, Member] = {}  # subscription key -> the pair it stands for

    def start(self, lists: AccessLists) -> list[TreeEffect]:
        """The broker takes part in the overlay: it joins the trees it is a member of already
        (away durable registrations count from the start)."""
        self.lists = lists
        return [JoinTree(tree, (), None) for tree in self.memberships.members]

    def join(self, key: int, tree: str, member: Member) -> list[TreeEffect]:
        """Subscription `key`, for `member`, joins `tree`: nothing to do outside an overlay. A
        JoinTree the composer cannot carry out (a local limit) is taken back with `undo`."""
        first = self.memberships.first(tree)
        self.memberships.join(key, tree)
        named = self.named.setdefault(tree, {})
        named[member] = named.get(member, 0) + 1
        self._member_of[key] = member
        if self.lists is None:
            return []
        if first:  # with rules, this broker creates the trees it joins first (multicast/access.py)
            return [JoinTree(tree, (member,), self.guard.creation(member[0], tree))]
        return [NameMembers(tree, None, (member,))]

    def undo(self, key: int) -> None:
        """The JoinTree of `key` failed: nothing of it stays."""
        tree, last = self.memberships.leave(key, held=False)
        assert last, "undo is for a first member"
        self._unname(key, tree)

    def leave(self, key: int, held: bool) -> tuple[str, list[TreeEffect]]:
        """Subscription `key` leaves its tree (`held`: its durable registration stays a member in
        its place): the tree, and what the broker's SUBSCRIBE and membership become."""
        tree, last = self.memberships.leave(key, held)
        gone = self._unname(key, tree)
        effects: list[TreeEffect] = []
        if self.lists is not None and gone is not None:
            effects.append(NameMembers(tree, gone, self._names(tree)))
        if last and self.lists is not None:
            effects.append(LeaveTree(tree))
        return tree, effects

    def member_gone(self, tree: str) -> list[TreeEffect]:
        """An away durable registration of `tree` ended (or its subscriber is back on a subend)."""
        return [LeaveTree(tree)] if self.memberships.member_gone(tree) and self.lists is not None else []

    # ---- the access lists ----------------------------------------------------------------------

    def may_read_everything(self, identity: str) -> bool:
        """Whether `identity` may read every channel here (a READ's SPAN frames carry them all)."""
        return self.guard.may_read_everything(identity, self.lists)

    def recreations(self) -> list[CreateTree]:
        """After the guard's rules were reloaded: each tree this broker created, to CREATE again
        with its new list (the rendez-vous point passes it down)."""
        return [] if self.lists is None else [CreateTree(*r) for r in self.guard.recreations(self.lists.created())]

    def refusal(self, identity: str, pattern: str) -> TidingsError | None:
        """The refusal when the access list this broker holds for the pattern's tree excludes it."""
        tree = subscription_tree(pattern)
        lists = self.lists
        if lists is None or lists.admits(tree, identity, pattern) is not False:
            return None
        return self.guard.tree_refusal(identity, pattern, tree, lists.creator(tree))

    def excluded(self, tree: str, acl: Acl | None, creator: str) -> list[tuple[int, TidingsError]]:
        """The subscriptions on `tree` whose pair its new list `acl` (from `creator`) does not
        admit, each with its refusal, in the order they joined."""
        out: list[tuple[int, TidingsError]] = []
        for key in self.memberships.subends_on(tree):
            identity, pattern = self._member_of[key]
            if not admits(acl, identity, pattern):
                out.append((key, self.guard.tree_refusal(identity, pattern, tree, creator)))
        return out

    def _unname(self, key: int, tree: str) -> Member | None:
        """`key` no longer stands for its pair: the pair, when no subscription does any more."""
        member = self._member_of.pop(key)
        named = self.named[tree]
        count = named[member] - 1
        if count:
            named[member] = count
            return None
        del named[member]
        if not named:
            del self.named[tree]
        return member

    def _names(self, tree: str) -> tuple[Member, ...]:
        return tuple(self.named.get(tree, ()))[:MEMBERS_PER_SUBSCRIBE_MAX]
