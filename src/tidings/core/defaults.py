"""Option defaults, each written once.

A default that both `BrokerConfig` (the documented options, docs/configuration.md) and a machine's
own config carry (ScribeConfig, OverlayConfig, PeerConfig, ReliabilityConfig, SourceConfig,
DirectoryConfig, the client session) is defined here, and both take it from here. A default only
one of them has stays beside its field. tests/unit/test_config_defaults.py holds the machine
configs `BrokerConfig()` builds equal to their own defaults, and docs/configuration.md's defaults
equal to `BrokerConfig()`'s.
"""

from __future__ import annotations

from typing import Final

from tidings.core.units import HOUR_NS, KIB, MIB, MILLISECOND_NS, SECOND_NS

# wire and links
FRAME_BYTES_MAX: Final = 8 * MIB
EVENT_BYTES_MAX: Final = 1 * MIB
HELLO_FRAME_BYTES_MAX: Final = 16 * KIB
HANDSHAKE_TIMEOUT_NS: Final = 5 * SECOND_NS
PEER_QUEUE_BYTES_MAX: Final = 4 * MIB
PING_INTERVAL_NS: Final = 5 * SECOND_NS
REFUSAL_WINDOW_NS: Final = 100 * MILLISECOND_NS

# the overlay (Pastry)
LEAF_SET_SIZE: Final = 16
NEIGHBOURHOOD_SIZE: Final = 32
KEEPALIVE_INTERVAL_NS: Final = 1 * SECOND_NS
FAILURE_TIMEOUT_NS: Final = 3 * SECOND_NS
JOIN_TIMEOUT_NS: Final = 5 * SECOND_NS
ROUTE_HOPS_MAX: Final = 40
ROUTING_REPAIR_INTERVAL_NS: Final = 30 * SECOND_NS
REVIVE_INTERVAL_NS: Final = 10 * SECOND_NS

# multicast trees (Scribe)
HEARTBEAT_INTERVAL_NS: Final = 1 * SECOND_NS
PARENT_TIMEOUT_NS: Final = 3 * SECOND_NS
TREE_REFRESH_INTERVAL_NS: Final = 10 * SECOND_NS
CHILD_TIMEOUT_NS: Final = 30 * SECOND_NS
TREE_REPLICAS: Final = 3
EMPTY_TREE_HOLD_NS: Final = 10 * SECOND_NS
TREES_MAX: Final = 10_000
CHILDREN_PER_TREE_MAX: Final = 64

# the pubend directory
DIRECTORY_ANNOUNCE_INTERVAL_NS: Final = 1 * SECOND_NS
DIRECTORY_SYNC_INTERVAL_NS: Final = 60 * SECOND_NS
DIRECTORY_ENTRY_AGE_NS_MAX: Final = 30 * 24 * HOUR_NS

# guaranteed delivery (Gryphon's streams) and release
FILTER_SUMMARY_BYTES_MAX: Final = 64 * KIB
NACK_MERGE_TICKS: Final = 1_000
RELEASE_KEEP_NS: Final = 1 * HOUR_NS
MAX_RETAIN_NS: Final = 24 * HOUR_NS
RELEASE_HOLD_NS: Final = 300 * SECOND_NS
RETRANSMIT_WINDOW_BYTES: Final = 4 * MIB
RETRANSMIT_WAIT_NS: Final = 200 * MILLISECOND_NS
# flow control of first-time knowledge per tree (core/reliability/flow_window.py): in flight beyond the
# root's ACK, held meanwhile, and how long the root's ACKs may stop before the window opens anyway
FLOW_WINDOW_BYTES: Final = 2 * MIB
FLOW_HOLD_BYTES_MAX: Final = 32 * MIB
FLOW_STALL_NS: Final = 1 * SECOND_NS
# a subscription starts this far back for other brokers' events (clocks differ); a moved plain one too
CLOCK_SKEW_ALLOWANCE_NS: Final = 1 * SECOND_NS
