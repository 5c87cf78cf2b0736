"""Broker configuration: every limit and timer, named with its unit, with documented defaults.

`BrokerConfig.from_mapping` takes the parsed TOML of `tidings broker --config FILE` (flat keys, or a
`[broker]` table) and rejects unknown keys and wrong types with a message naming the key, so a typo
never silently leaves a default in force. docs/configuration.md lists every option.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from tidings.core import defaults
from tidings.core.broker.directory import REFRESH_INTERVAL_NS, DirectoryConfig
from tidings.core.errors import TidingsError
from tidings.core.links.link import PeerConfig
from tidings.core.multicast.agent import ScribeConfig
from tidings.core.overlay.node import OverlayConfig
from tidings.core.reliability.node import ReliabilityConfig
from tidings.core.units import GIB, KIB, MIB, MILLISECOND_NS, SECOND_NS, ns_to_us
from tidings.core.wire.messages import SPAN_BYTES_FACTOR

SWITCHES = frozenset({"best_effort_delivery", "flow_control", "nack_complete"})  # the keys that take true or false
LEASE_NS_MIN = 300 * MILLISECOND_NS


class ConfigError(TidingsError, ValueError):
    code = "bad-config"


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    # wire
    frame_bytes_max: int = defaults.FRAME_BYTES_MAX
    event_bytes_max: int = defaults.EVENT_BYTES_MAX
    handshake_timeout_ns: int = defaults.HANDSHAKE_TIMEOUT_NS
    # what a connection can make the broker hold (docs/security.md): frames before the handshake is
    # done (HELLO, AUTH, PEER_HELLO, PEER_AUTH) are at most this long (or frame_bytes_max, if smaller)
    hello_frame_bytes_max: int = defaults.HELLO_FRAME_BYTES_MAX
    # a partial frame must keep arriving: no byte for this long (while the broker reads) closes the connection
    frame_progress_timeout_ns: int = 10 * SECOND_NS
    # the bytes held in partial frames across all connections; a connection whose partial frame
    # would take the total past it is closed
    partial_frames_bytes_max: int = 16 * MIB
    # replies (of every kind) queued to a connection past send_queue_bytes_max, or within one read
    # of its bytes, before it is closed (it is not read while its queue is over send_queue_bytes_max)
    send_queue_overflow_bytes_max: int = 1 * MIB
    # a durable subscription's checkpoint token moves up by SILENCE this often while nothing matches
    durable_silence_interval_ns: int = 1 * SECOND_NS
    # a connection's subscriptions end when it has not renewed (RENEW or SUBSCRIBE) for this long
    lease_ns: int = 30 * SECOND_NS
    # per-connection output: past this many queued bytes a connection counts as slow and its
    # subscriptions switch from live delivery to reading the log
    send_queue_bytes_max: int = 4 * MIB
    # an MQTT shared subscription group's events waiting at its home for a member with window
    # space: past this the group's subscription is paced as a slow connection's (core/share/home.py)
    share_queued_bytes_max: int = 4 * MIB
    subscriptions_per_connection_max: int = 1024
    connections_max: int = 10_000
    # past this many client connections the broker advises new clients to move (core/broker/advice.py)
    clients_advised_above: int = 8_000
    # events accepted but not yet synced: past this, publishers are not read until the disk catches up
    pending_sync_bytes_max: int = 64 * MIB
    # after refusing a client something, its connection is not read again for this long (at most
    # one refused message, so one ERROR per reason, per window: core/broker/refusals.py)
    refusal_window_ns: int = defaults.REFUSAL_WINDOW_NS
    # a PUBLISH over its identity's rate waits unread at least this long (so a flooder of small
    # PUBLISHes is resumed a few dozen times a second, not once per event)
    publish_wait_ns_min: int = 20 * MILLISECOND_NS
    # reading the log for catching-up subscriptions
    log_read_bytes_max: int = 1 * MIB
    # pubend log
    segment_bytes_max: int = 64 * MIB
    retention_bytes_max: int = 10 * GIB
    retention_age_ns: int = 7 * 24 * 3600 * SECOND_NS
    retention_check_interval_ns: int = 60 * SECOND_NS
    # the release protocol (docs/durable.md#release): events every durable subscriber released are
    # removed once older than release_keep_ns (kept meanwhile for replays: --from, Spark batch reads)
    release_keep_ns: int = defaults.RELEASE_KEEP_NS
    # early release (Gryphon's maxRetain): events older than this are released even if a
    # disconnected durable subscriber has not consumed them (it gets a gap); connected subscribers
    # that keep up never do
    max_retain_ns: int = defaults.MAX_RETAIN_NS
    # a child broker that leaves a tree holds release at its last value this long (a failed
    # forwarder's subtree repairs meanwhile)
    release_hold_ns: int = defaults.RELEASE_HOLD_NS
    # a durable subscription disconnected this long is forgotten by its broker (it no longer holds
    # release); its token still resumes it, from what the pubends retain
    durable_expiry_ns: int = 7 * 24 * 3600 * SECOND_NS
    # the durable subscriptions a broker hosts are saved at most this often when they change
    durable_save_interval_ns: int = 250_000_000
    # durable subscriptions one broker hosts, connected or away; past it a new one is refused
    durable_registrations_max: int = 100_000
    # record which ticks matched each durable registration (the PFS, <data>/pfs), so that one that comes
    # back to this broker fetches only what matched it while away (docs/durable.md)
    durable_pfs: bool = True
    # idempotent publish (core/publish/dedup.py, docs/delivery.md#idempotent-publish): a (producer, pseq)
    # is logged at most once while its original is younger than dedup_window_ns, and among the
    # newest dedup_entries_max entries (runs of consecutive pseqs logged together) of the newest
    # dedup_producers_max producers; past that it is logged again
    dedup_window_ns: int = 600 * SECOND_NS
    dedup_entries_max: int = 100_000
    dedup_producers_max: int = 10_000
    # the overlay (Pastry): see docs/cluster.md
    leaf_set_size: int = defaults.LEAF_SET_SIZE
    neighbourhood_size: int = defaults.NEIGHBOURHOOD_SIZE
    keepalive_interval_ns: int = defaults.KEEPALIVE_INTERVAL_NS
    failure_timeout_ns: int = defaults.FAILURE_TIMEOUT_NS
    join_timeout_ns: int = defaults.JOIN_TIMEOUT_NS
    route_hops_max: int = defaults.ROUTE_HOPS_MAX
    routing_repair_interval_ns: int = defaults.ROUTING_REPAIR_INTERVAL_NS
    revive_interval_ns: int = defaults.REVIVE_INTERVAL_NS  # a failed broker is asked again: partitions heal
    # multicast trees (Scribe)
    heartbeat_interval_ns: int = defaults.HEARTBEAT_INTERVAL_NS
    parent_timeout_ns: int = defaults.PARENT_TIMEOUT_NS
    refresh_interval_ns: int = defaults.TREE_REFRESH_INTERVAL_NS
    child_timeout_ns: int = defaults.CHILD_TIMEOUT_NS
    tree_replicas: int = defaults.TREE_REPLICAS
    empty_tree_hold_ns: int = defaults.EMPTY_TREE_HOLD_NS
    trees_max: int = defaults.TREES_MAX
    children_per_tree_max: int = defaults.CHILDREN_PER_TREE_MAX
    # the pubend directory (core/broker/directory.py, docs/cluster.md#the-pubend-directory)
    # a gossip round: own entry, then changes to the leaf set
    directory_announce_interval_ns: int = defaults.DIRECTORY_ANNOUNCE_INTERVAL_NS
    # the whole directory to one leaf-set member in turn
    directory_sync_interval_ns: int = defaults.DIRECTORY_SYNC_INTERVAL_NS
    directory_entry_age_ns_max: int = defaults.DIRECTORY_ENTRY_AGE_NS_MAX  # an entry not re-issued this long is dropped
    # links between brokers
    peer_queue_bytes_max: int = defaults.PEER_QUEUE_BYTES_MAX
    ping_interval_ns: int = defaults.PING_INTERVAL_NS
    # guaranteed delivery across brokers (Gryphon's streams): see docs/delivery.md
    gap_curiosity_ns: int = 100 * MILLISECOND_NS  # GCT: a gap this old is nacked
    nack_repeat_ns_min: int = 300 * MILLISECOND_NS  # NRT: an unanswered nack is repeated after this
    nack_repeat_ns_max: int = 5 * SECOND_NS  # ... doubling while unanswered, up to this
    silence_interval_ns: int = 250 * MILLISECOND_NS  # periodic silence on trees with recent traffic
    stream_idle_ns: int = 30 * SECOND_NS  # a pubend forgets a tree's stream acked and idle this long
    stream_recovery_ns: int = 60 * SECOND_NS  # a restarted pubend re-announces trees of this much log
    stream_cache_bytes_max: int = 8 * MIB  # records one (tree, pubend) stream keeps for its consumers
    knowledge_bytes_max: int = 1 * MIB  # records in one knowledge message (one larger event goes alone)
    nack_ranges_max: int = 64  # ranges in one NACK
    nack_range_ticks_max: int = 60_000_000  # width of one nacked range, in ticks (microseconds)
    # a durable catchup fetches matching ticks this close as one range
    nack_merge_ticks: int = defaults.NACK_MERGE_TICKS
    nack_complete: bool = True  # complete nacks: PFS-sparse catch-ups through forwarders (delivery.md)
    streams_max: int = 100_000  # (tree, pubend) streams on one broker
    nack_reads_max: int = 16  # log reads in flight answering nacks
    # a tree's nack answers sent beyond what its root acknowledged
    retransmit_window_bytes: int = defaults.RETRANSMIT_WINDOW_BYTES
    # a window the root's acks have not moved this long starts again
    retransmit_wait_ns: int = defaults.RETRANSMIT_WAIT_NS
    flow_control: bool = True  # false: a pubend sends first-time knowledge at once, unpaced (to measure it)
    flow_window_bytes: int = defaults.FLOW_WINDOW_BYTES  # first-time knowledge beyond a tree's root's ACK
    flow_hold_bytes_max: int = defaults.FLOW_HOLD_BYTES_MAX  # held meanwhile, per tree
    flow_stall_ns: int = defaults.FLOW_STALL_NS  # a root's ACKs stopped this long: the window opens
    # a tree's filter summary sent to its parent; past it, "everything"
    filter_summary_bytes_max: int = defaults.FILTER_SUMMARY_BYTES_MAX
    filter_in_network: bool = True  # False, for measuring only: forwarders send every child everything
    clock_skew_allowance_ns: int = defaults.CLOCK_SKEW_ALLOWANCE_NS  # a subscription starts this far before SUBSCRIBED
    # for measuring the protocol's cost only: events cross brokers best effort, without streams
    best_effort_delivery: bool = False

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> BrokerConfig:
        if "broker" in data and isinstance(data["broker"], Mapping):
            data = data["broker"]
        known = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in data.items():
            if key not in known:
                raise ConfigError(f"unknown configuration key {key!r}; known keys: {', '.join(sorted(known))}")
            if key in SWITCHES:
                if type(value) is not bool:
                    raise ConfigError(f"configuration key {key!r} must be true or false, got {value!r}")
            elif type(value) is not int or value <= 0:
                raise ConfigError(f"configuration key {key!r} must be a positive integer, got {value!r}")
            values[key] = value
        cfg = cls(**values)
        if cfg.event_bytes_max + 4 * KIB > cfg.frame_bytes_max:
            raise ConfigError("frame_bytes_max must exceed event_bytes_max by at least 4 KiB")
        for shorter, longer in (("heartbeat_interval_ns", "parent_timeout_ns"),
                                ("refresh_interval_ns", "child_timeout_ns"),
                                ("keepalive_interval_ns", "failure_timeout_ns")):
            if getattr(cfg, shorter) >= getattr(cfg, longer):
                raise ConfigError(f"{shorter} must be shorter than {longer}")
        if cfg.lease_ns < LEASE_NS_MIN:
            raise ConfigError(f"lease_ns must be at least {LEASE_NS_MIN} (clients renew every third of it)")
        if cfg.leaf_set_size % 2:
            raise ConfigError("leaf_set_size must be even (half on each side of the node)")
        if cfg.retransmit_window_bytes < cfg.log_read_bytes_max:  # else a read goes only into an empty window
            raise ConfigError("retransmit_window_bytes must be at least log_read_bytes_max "
                              "(the default window is four log reads)")
        return cfg

    @property
    def spans_fit_frames(self) -> bool:
        """Whether a READ's SPAN, up to SPAN_BYTES_FACTOR log reads long, fits in a frame (if not,
        READs are answered record by record)."""
        return SPAN_BYTES_FACTOR * self.log_read_bytes_max <= self.frame_bytes_max

    def overlay_config(self) -> OverlayConfig:
        return OverlayConfig(
            leaf_set_size=self.leaf_set_size, neighbourhood_size=self.neighbourhood_size,
            keepalive_interval_ns=self.keepalive_interval_ns, failure_timeout_ns=self.failure_timeout_ns,
            join_timeout_ns=self.join_timeout_ns, route_hops_max=self.route_hops_max,
            routing_repair_interval_ns=self.routing_repair_interval_ns,
            revive_interval_ns=self.revive_interval_ns,
        )

    def directory_config(self) -> DirectoryConfig:
        age = self.directory_entry_age_ns_max
        return DirectoryConfig(announce_interval_ns=self.directory_announce_interval_ns,
                               sync_interval_ns=self.directory_sync_interval_ns, entry_age_ns_max=age,
                               refresh_interval_ns=min(REFRESH_INTERVAL_NS, max(1, age // 4)))

    def scribe_config(self) -> ScribeConfig:
        return ScribeConfig(
            heartbeat_interval_ns=self.heartbeat_interval_ns, parent_timeout_ns=self.parent_timeout_ns,
            refresh_interval_ns=self.refresh_interval_ns, child_timeout_ns=self.child_timeout_ns,
            replicas=self.tree_replicas, empty_hold_ns=self.empty_tree_hold_ns, trees_max=self.trees_max,
            children_per_tree_max=self.children_per_tree_max,
        )

    def reliability_config(self) -> ReliabilityConfig:
        return ReliabilityConfig(
            gap_curiosity_ns=self.gap_curiosity_ns, nack_repeat_ns_min=self.nack_repeat_ns_min,
            nack_repeat_ns_max=self.nack_repeat_ns_max, silence_interval_ns=self.silence_interval_ns,
            stream_idle_ns=self.stream_idle_ns, recovery_ns=self.stream_recovery_ns,
            stream_cache_bytes_max=self.stream_cache_bytes_max, nack_ranges_max=self.nack_ranges_max,
            nack_range_ticks_max=self.nack_range_ticks_max, knowledge_bytes_max=self.knowledge_bytes_max,
            nack_merge_ticks=self.nack_merge_ticks, nack_complete=self.nack_complete,
            clock_skew_allowance_us=ns_to_us(self.clock_skew_allowance_ns),
            streams_max=self.streams_max, read_bytes_max=self.log_read_bytes_max, reads_max=self.nack_reads_max,
            trees_max=self.trees_max, best_effort=self.best_effort_delivery,
            summary_bytes_max=self.filter_summary_bytes_max, filtering=self.filter_in_network,
            release_keep_us=ns_to_us(self.release_keep_ns), max_retain_us=ns_to_us(self.max_retain_ns),
            release_hold_ns=self.release_hold_ns, retransmit_window_bytes=self.retransmit_window_bytes,
            retransmit_wait_ns=self.retransmit_wait_ns,
            flow_window_bytes=self.flow_window_bytes if self.flow_control else 0,
            flow_hold_bytes_max=self.flow_hold_bytes_max, flow_stall_ns=self.flow_stall_ns,
        )

    def peer_config(self) -> PeerConfig:
        return PeerConfig(
            frame_bytes_max=self.frame_bytes_max,
            hello_frame_bytes_max=min(self.hello_frame_bytes_max, self.frame_bytes_max),
            handshake_timeout_ns=self.handshake_timeout_ns, peer_queue_bytes_max=self.peer_queue_bytes_max,
            ping_interval_ns=self.ping_interval_ns,
        )
