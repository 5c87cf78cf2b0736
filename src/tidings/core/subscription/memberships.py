"""Which Scribe trees this broker is a member of, on behalf of whom (Scribe §2.2, Gryphon durable §3).

Theory of operation. A subscription that is not bounded (a subend without `end`) belongs to one
tree, its pattern's (multicast/trees.py). The broker is one Scribe member of that tree for all its
local subscriptions on it: it joins the tree (SUBSCRIBE towards the rendez-vous point) when the
first of them arrives and leaves it (UNSUBSCRIBE) when the last one is gone; the ones between only
change the count. A durable subscription whose subscriber is away (core/durable/registrations.py) still
counts, in its subend's place, so the tree keeps carrying its events and the pubends keep holding
release for it: its registration is one member until it resumes here (its new subend then counts
instead), moves to another broker, is unsubscribed or expires. Registrations loaded at start count
from the start.

This class only counts and says when the broker joins or leaves a tree; the broker carries that
out (ClusterMember.subscribe / unsubscribe, and the reliability node's local subscribe/unsubscribe
for each subend). A join is recorded once it succeeded, so a refused one leaves nothing behind.

Invariants: `members[tree]` is the number of subends in `tree_of` on `tree` plus the away durable
registrations of `tree`, and is never 0 (a tree with no member is not in `members`).
"""

from __future__ import annotations


class TreeMemberships:
    __slots__ = ("members", "tree_of")

    def __init__(self) -> None:
        self.tree_of: dict[int, str] = {}  # subend key -> the tree it belongs to
        self.members: dict[str, int] = {}  # tree -> local members: subends and away durable registrations

    def first(self, tree: str) -> bool:
        """Whether a member joining `tree` now would be its first here (the broker joins the tree)."""
        return tree not in self.members

    def join(self, key: int, tree: str) -> None:
        """Subend `key` is a member of `tree` (the broker is, once `first(tree)` was carried out)."""
        assert key not in self.tree_of
        self.tree_of[key] = tree
        self.members[tree] = self.members.get(tree, 0) + 1

    def hold(self, tree: str, count: int) -> None:
        """`count` durable registrations of `tree` are away: each is a member until it ends."""
        assert count > 0
        self.members[tree] = self.members.get(tree, 0) + count

    def leave(self, key: int, held: bool) -> tuple[str, bool]:
        """Subend `key` leaves its tree (`held`: its durable registration stays a member in its
        place): the tree, and whether the broker leaves it (its last member is gone)."""
        tree = self.tree_of.pop(key)
        return tree, not held and self.member_gone(tree)

    def member_gone(self, tree: str) -> bool:
        """One member of `tree` is gone: whether it was the last (the broker leaves the tree)."""
        members = self.members[tree] - 1
        if members:
            self.members[tree] = members
            return False
        del self.members[tree]
        return True

    def subends_on(self, tree: str) -> list[int]:
        """The subends on `tree`, in the order they joined."""
        return [key for key, t in self.tree_of.items() if t == tree]
