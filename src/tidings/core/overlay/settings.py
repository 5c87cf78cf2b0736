"""Pastry's parameters and limits (`OverlayConfig`), the node's timers and the random source it is
given.

Apart from the node so that the machines it composes (failure repair) read the same configuration
without importing the node.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from tidings.core import defaults
from tidings.core.units import SECOND_NS


class Rng(Protocol):
    """What the node draws from its injected `random.Random` (typed by shape: cores never import
    `random`, so nothing can reach for the global generator)."""

    def randrange(self, stop: int, /) -> int: ...


class OverlayTimer(Enum):
    JOIN = "join"  # the join's answer is overdue (or the bootstrap's retry is due)
    KEEPALIVE = "keepalive"  # KEEPALIVE to the leaf set
    LEAF_SILENCE = "leaf-silence"  # a leaf may have been silent for failure_timeout_ns
    REPAIR = "repair"  # lazy routing-table and leaf-set maintenance
    REVIVE = "revive"  # ask a failed node for its leaf set


@dataclass(frozen=True, slots=True)
class OverlayConfig:
    """Pastry's parameters (b = 4 is fixed by node_id.py) and the node's limits."""

    leaf_set_size: int = defaults.LEAF_SET_SIZE
    neighbourhood_size: int = defaults.NEIGHBOURHOOD_SIZE
    keepalive_interval_ns: int = defaults.KEEPALIVE_INTERVAL_NS
    failure_timeout_ns: int = defaults.FAILURE_TIMEOUT_NS
    join_timeout_ns: int = defaults.JOIN_TIMEOUT_NS
    join_retry_interval_ns_min: int = SECOND_NS // 10  # first retry after an unreachable bootstrap
    route_hops_max: int = defaults.ROUTE_HOPS_MAX
    routing_repair_interval_ns: int = defaults.ROUTING_REPAIR_INTERVAL_NS
    failed_memory_ns: int = 60 * SECOND_NS  # third-party mentions of a failed node are ignored
    failed_memory_max: int = 1024
    probes_pending_max: int = 128  # RTT measurements asked of the runtime and not yet answered
    row_repair_helpers: int = 3  # nodes asked for a replacement when a routing-table entry fails
    revive_interval_ns: int = defaults.REVIVE_INTERVAL_NS  # one node declared failed is asked for its leaf set
    lost_nodes_max: int = 64  # failed nodes remembered for that, newest kept
