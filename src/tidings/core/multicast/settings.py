"""Scribe's parameters and limits (`ScribeConfig`) and its one timer (`ScribeTimer.TICK`).

Apart from the agent so that the machines it composes (tree table, rendez-vous point) read the same
configuration without importing the agent.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from tidings.core import defaults


class ScribeTimer(Enum):
    TICK = "tick"  # liveness's one tick per node: heartbeats, refreshes, parent and child timeouts


TICK = ScribeTimer.TICK


@dataclass(frozen=True, slots=True)
class ScribeConfig:
    heartbeat_interval_ns: int = defaults.HEARTBEAT_INTERVAL_NS
    parent_timeout_ns: int = defaults.PARENT_TIMEOUT_NS
    refresh_interval_ns: int = defaults.TREE_REFRESH_INTERVAL_NS
    child_timeout_ns: int = defaults.CHILD_TIMEOUT_NS
    replicas: int = defaults.TREE_REPLICAS  # k: leaf-set nodes holding a copy of a root's tree metadata
    empty_hold_ns: int = defaults.EMPTY_TREE_HOLD_NS  # a publisher's node sends nothing to an empty tree this long
    trees_max: int = defaults.TREES_MAX  # tree entries on this node (member, forwarder or root)
    children_per_tree_max: int = defaults.CHILDREN_PER_TREE_MAX
    replicas_max: int = 10_000  # metadata replicas held for nearby roots
    publisher_memory_max: int = 4096  # (tree, publisher node) pairs a root told TREE_EMPTY
    empty_trees_max: int = 10_000  # trees this node was told are empty
    # False hands every event that reaches a node to the reliability layer as EventArrived, which
    # decides per child what to send (send_event); True multicasts each event to every child
    forward_events: bool = True

    def __post_init__(self) -> None:
        assert 0 < self.heartbeat_interval_ns < self.parent_timeout_ns
        assert 0 < self.refresh_interval_ns < self.child_timeout_ns
