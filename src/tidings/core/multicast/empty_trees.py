"""Both ends of TREE_EMPTY / TREE_ACTIVE: publishing nothing to trees without members.

A rendez-vous point with neither children nor a local member answers a PUBLISH with TREE_EMPTY and
remembers the publisher's node (`EmptyTreeMemory`); when the tree gains a member or child there, it
sends TREE_ACTIVE to every node it remembers. The publisher's node holds the tree as suppressed
(`Suppressions`) and sends it nothing until TREE_ACTIVE arrives, the rendez-vous point that said
"empty" is reported dead, or `hold_ns` passes. The memory is bounded (oldest forgotten first) and
soft: a forgotten publisher or a rendez-vous point that moved costs at most `hold_ns` of events
withheld from a tree that gained members meanwhile, never a publisher silenced for good.

The publisher's node's memory has two readers: the Scribe agent's `publish` (a routed PUBLISH not
sent past "empty"), and, with guaranteed delivery, the pubend's source, which reads it directly
(`ScribeAgent.said_empty`): a sync's publish asks it about each tree of its events without a call
into the agent, and both see the same memory lapse at the same `now`.
"""

from __future__ import annotations


class EmptyTreeMemory:
    """At a rendez-vous point: which publishers' nodes were told which tree is empty."""

    def __init__(self, entries_max: int) -> None:
        assert entries_max > 0
        self._entries_max = entries_max
        self._publishers: dict[str, dict[str, None]] = {}  # tree -> publisher addresses, oldest first
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def remember(self, tree: str, publisher: str) -> None:
        if publisher in self._publishers.get(tree, {}):
            return
        if self._count >= self._entries_max:
            self._forget_oldest()
        self._publishers.setdefault(tree, {})[publisher] = None
        self._count += 1

    def release(self, tree: str) -> list[str]:
        """Forget `tree` and return the publishers to tell TREE_ACTIVE, oldest first."""
        publishers = list(self._publishers.pop(tree, {}))
        self._count -= len(publishers)
        return publishers

    def trees(self) -> list[str]:
        return list(self._publishers)

    def _forget_oldest(self) -> None:
        tree, publishers = next(iter(self._publishers.items()))
        del publishers[next(iter(publishers))]
        self._count -= 1
        if not publishers:
            del self._publishers[tree]


class Suppressions:
    """At a publisher's node: trees a rendez-vous point said are empty, until when, and who said so."""

    def __init__(self, trees_max: int, hold_ns: int) -> None:
        assert trees_max > 0 and hold_ns > 0
        self._trees_max = trees_max
        self._hold_ns = hold_ns
        self._until: dict[str, tuple[int, str]] = {}  # tree -> (until_ns, rendez-vous point address)

    def suppress(self, now: int, tree: str, root: str) -> None:
        self._until.pop(tree, None)
        if len(self._until) >= self._trees_max:
            del self._until[next(iter(self._until))]
        self._until[tree] = (now + self._hold_ns, root)

    def suppressed(self, now: int, tree: str) -> bool:
        held = self._until.get(tree)
        if held is None:
            return False
        if now < held[0]:
            return True
        del self._until[tree]
        return False

    def lift(self, tree: str) -> None:
        self._until.pop(tree, None)

    def lift_root(self, root: str) -> None:
        """The rendez-vous point at `root` died: its trees may have a new, non-empty one."""
        for tree in [t for t, (_, said) in self._until.items() if said == root]:
            del self._until[tree]
