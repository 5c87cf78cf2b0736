"""The broker's figures, each declared once: its `/status` key, its `/metrics` name and help, its
type, and the machine that keeps it (docs/operations.md lists them).

Theory of operation. Every figure is an int a machine keeps in a typed field, or derives from its
state: a counter (a count since the broker started; Prometheus shows it as `tidings_NAME_total`)
or a gauge (a current value, its unit in its name). `FIGURES` is the one list of them. The broker's
`status()` reads its own figures from their owners through this list (`read`), and the HTTP
endpoint (aio/http.py) turns the same list into metric families at each scrape, finding each value
in the status where its owner put it (`under`: the reliability node's figures are in its own
status, under `delivery`). A figure whose owner is absent (a broker outside any overlay has no
remote deliveries) is left out of both. Figures with labels (per peer, tree, connection, channel,
error code) are families of their own, written by aio/http.py from the status's lists.

`status` composes the whole of the broker's status, these figures first among what its machines
report. The owner named is the machine whose field it is, for whoever looks for where a figure comes from.
Reading a figure changes nothing; `status()` runs between two inputs, never in the middle of one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tidings.core.broker.parts import BrokerParts as Observed  # the machines the figures are read from


class Kind(StrEnum):
    COUNTER = "counter"  # since the broker started
    GAUGE = "gauge"  # now


COUNTER, GAUGE = Kind


@dataclass(frozen=True, slots=True)
class Figure:
    key: str  # in /status
    name: str  # in /metrics, after the tidings_ prefix (and before a counter's _total)
    kind: Kind
    help: str
    owner: str  # the machine that keeps it
    read: Callable[[Observed], int | None] | None = None  # the broker's own: from its owner
    under: tuple[str, ...] = ()  # else: where in the status its owner reports it
    overlay: bool = False  # of the broker's part in an overlay: absent outside one


DELIVERY = ("delivery",)
SOURCE = ("delivery", "source")

FIGURES: tuple[Figure, ...] = (
    # counters
    Figure("events_published", "events_published", COUNTER, "events logged by this broker's pubend (acknowledged)",
           "Intake", lambda b: b.intake.events_published),
    Figure("events_rejected", "events_rejected", COUNTER, "published events this broker refused",
           "Intake", lambda b: b.intake.events_rejected),
    Figure("events_delivered", "events_delivered", COUNTER, "events delivered to this broker's subscribers",
           "LocalSubscriptions (fan-out and log reads)", lambda b: b.local.events_delivered),
    Figure("read_span_bytes", "read_span_bytes", COUNTER, "bytes of the log sent to bulk readers as they are (SPAN), "
           "whose events are not counted in events_delivered", "LocalSubscriptions (log reads)",
           lambda b: b.local.read_span_bytes),
    Figure("events_remote_delivered", "events_remote_delivered", COUNTER,
           "events from other brokers' pubends delivered to this broker's subscribers",
           "LocalSubscriptions (the trees' records)", lambda b: b.local.remote_delivered, overlay=True),
    Figure("peer_messages_rejected", "peer_messages_rejected", COUNTER, "malformed messages from other brokers",
           "LocalSubscriptions, ClusterMember",
           lambda b: b.local.records_rejected + (b.cluster.peer_messages_rejected if b.cluster else 0),
           overlay=True),
    Figure("leases_expired", "leases_expired", COUNTER,
           "subscription leases that ran out (their subscriptions were removed)", "Leases",
           lambda b: b.leases.expired_total),
    Figure("dedup_duplicates", "publish_duplicates", COUNTER,
           "idempotent publishes answered with an earlier tick, not logged", "DedupWindow",
           lambda b: b.dedup.duplicates),
    Figure("dedup_forgotten_early", "dedup_entries_evicted", COUNTER,
           "dedup entries forgotten before their time by dedup_entries_max or dedup_producers_max", "DedupWindow",
           lambda b: b.dedup.forgotten_early),
    Figure("pfs_records_written", "pfs_records_written", COUNTER,
           "PFS records: ticks that matched a durable registration here", "Constream",
           lambda b: b.constream.records_written),
    Figure("pfs_catchups", "pfs_catchups", COUNTER, "durable catchups the PFS told which ticks matched them",
           "Constream", lambda b: b.constream.catchups),
    Figure("pfs_ticks_silenced", "pfs_ticks_silenced", COUNTER,
           "ticks durable catchups did not fetch (the PFS said no match)", "Constream",
           lambda b: b.constream.ticks_silenced),
    # gauges
    Figure("clients", "clients", GAUGE, "client connections open", "Reading", lambda b: b.reading.open_clients()),
    Figure("leases_held", "leases_held", GAUGE, "client connections holding a subscription lease", "Leases",
           lambda b: len(b.leases)),
    Figure("subscriptions", "subscriptions", GAUGE, "subscriptions of this broker's clients", "LocalSubscriptions",
           lambda b: len(b.local.subends)),
    Figure("subscriptions_live", "subscriptions_live", GAUGE, "subscriptions receiving live events",
           "Subscription", lambda b: sum(1 for s in b.local.subends.values() if s.live)),
    Figure("catchup_readers", "subscriptions_catching_up", GAUGE, "subscriptions reading the log to catch up",
           "Subscription", lambda b: sum(1 for s in b.local.subends.values() if not s.live)),
    Figure("blocked_connections", "connections_blocked", GAUGE, "connections whose send queue is full",
           "Reading", lambda b: b.reading.blocked()),
    Figure("partial_frame_bytes", "partial_frame_bytes", GAUGE,
           "bytes held in partial frames, of partial_frames_bytes_max", "Reading (PartialFrames)",
           lambda b: b.reading.partials.held_bytes),
    Figure("pending_sync_batches", "pending_sync_batches", GAUGE, "publish batches written but not yet fsynced",
           "Pubend", lambda b: b.pubend.pending_batches),
    Figure("pending_sync_bytes", "pending_sync_bytes", GAUGE, "bytes written but not yet fsynced",
           "Pubend", lambda b: b.pubend.pending_bytes),
    Figure("paused_publishers", "publishers_paused", GAUGE, "publishers not read until the disk catches up",
           "Intake", lambda b: len(b.intake.paused)),
    Figure("log_bytes", "log_bytes", GAUGE, "size of the pubend log on disk", "LogState (the runtime's log)",
           lambda b: b.log.log_bytes),
    Figure("log_records", "log_records", GAUGE, "events held in the pubend log", "LogState (the runtime's log)",
           lambda b: b.log.record_count),
    Figure("first_tick", "log_first_tick", GAUGE, "the oldest retained tick (microseconds since the epoch)",
           "LogState (the runtime's log)", lambda b: b.log.first_tick),
    Figure("last_tick", "log_last_tick", GAUGE, "the newest durable tick (microseconds since the epoch)",
           "Pubend", lambda b: b.pubend.synced_tick),
    Figure("released_through", "log_released_through_tick", GAUGE,
           "ticks up to this one were released by retention", "LogState (the runtime's log)",
           lambda b: b.log.released_through),
    Figure("dedup_producers", "dedup_producers", GAUGE, "producers with entries in the idempotent-publish window",
           "DedupWindow", lambda b: b.dedup.producer_count),
    Figure("dedup_entries", "dedup_entries", GAUGE,
           "entries (runs of consecutive producer sequences) in the window", "DedupWindow",
           lambda b: b.dedup.entry_count),
    Figure("dedup_horizon", "dedup_horizon_tick", GAUGE,
           "idempotent publishes logged at or below this tick are forgotten", "DedupWindow", lambda b: b.dedup.horizon),
    Figure("pfs_streams", "pfs_streams", GAUGE, "(tree, pubend) streams the PFS records", "Constream",
           lambda b: b.constream.status()["pfs_streams"]),
    # the reliability node's (core/reliability/node.py), in its status
    Figure("nacks_sent", "nacks_sent", COUNTER, "nacks this broker sent upstream for ticks it lacked",
           "ReliabilityNode", under=DELIVERY),
    Figure("nack_ticks_sent", "nack_ticks_sent", COUNTER, "ticks asked for in the nacks this broker sent",
           "ReliabilityNode", under=DELIVERY),
    Figure("retransmissions_sent", "retransmissions_sent", COUNTER,
           "knowledge this broker retransmitted from its cache", "ReliabilityNode", under=DELIVERY),
    Figure("complete_nack_ticks_silenced", "complete_nack_ticks_silenced", COUNTER,
           "ticks a child's complete nack spared fetching (it knew them): its silence alone here",
           "TreeStreams", under=DELIVERY),
    Figure("cache_records_evicted", "stream_cache_records_evicted", COUNTER,
           "records the streams' caches let go past stream_cache_bytes_max while a consumer still wanted them",
           "TreeStreams", under=DELIVERY),
    Figure("peer_errors", "delivery_messages_rejected", COUNTER, "malformed delivery messages from other brokers",
           "ReliabilityNode", under=DELIVERY),
    Figure("total_order_late", "total_order_late_events", COUNTER,
           "events that reached a total-order merge too late", "ReliabilityNode", under=DELIVERY),
    Figure("nacks_received", "nacks_received", COUNTER, "nacks this broker's pubend received",
           "EventSource", under=SOURCE),
    Figure("ticks_retransmitted", "ticks_retransmitted", COUNTER, "ticks this broker's pubend re-sent from its log",
           "EventSource", under=SOURCE),
    Figure("records_read", "nack_records_read", COUNTER,
           "records this broker's pubend read back from its log to answer nacks", "EventSource", under=SOURCE),
    Figure("flow_holds", "flow_holds", COUNTER, "times a tree's flow window filled and this broker's pubend held "
           "first-time knowledge back for its root's ACKs", "FlowWindows", under=SOURCE),
    Figure("flow_stalls", "flow_stalls", COUNTER, "flow windows whose root's ACKs stopped for flow_stall_ns while "
           "they held (everything then went unpaced)", "FlowWindows", under=SOURCE),
    Figure("flow_spills", "flow_spills", COUNTER, "first-time knowledge messages not kept in memory past "
           "flow_hold_bytes_max (read back from the log when the window has room)", "FlowWindows", under=SOURCE),
    Figure("flow_read_backs", "flow_read_backs", COUNTER, "spilled ranges read back from the log and sent",
           "FlowWindows", under=SOURCE),
    Figure("flow_held_bytes", "flow_held_bytes", GAUGE, "record bytes this broker's pubend holds back for its trees' "
           "flow windows", "FlowWindows", under=SOURCE),
)


def read(broker: Observed) -> dict[str, int | None]:
    """The broker's own figures, by status key, read from the machines that keep them (None:
    not known yet, as a fresh log's first tick)."""
    joined = broker.cluster is not None
    return {figure.key: figure.read(broker) for figure in FIGURES
            if figure.read is not None and (joined or not figure.overlay)}


def status(broker: Observed, subscription: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    """The broker's status: its own figures, what its machines report (each subscription's by
    `subscription`) and what else an operator reads."""
    log, cluster = broker.log, broker.cluster
    return {
        "pubend": broker.pubend.pubend_id,
        "draining": broker.advice.draining,
        **read(broker),
        **broker.registrations.status(),
        "lease_ns": broker.leases.lease_ns,
        "last_event_tick": log.last_tick,  # the newest logged event's (Spark: is there anything to read?)
        "tick_marks": list(log.tick_marks),
        "channels": broker.intake.traffic.top(),
        "connections": broker.reading.status(subscription),
        **({} if cluster is None else cluster.status()),
        **broker.reading.client_errors.status(),
        **broker.guard.status(),
    }


def reported(status: dict[str, Any], figures: tuple[Figure, ...] = FIGURES) -> Iterator[tuple[Figure, int]]:
    """Each figure a status holds, with its value (in `figures`' order: FIGURES, or another section's)."""
    for figure in figures:
        where: Any = status
        for part in figure.under:
            where = where.get(part) if isinstance(where, dict) else None
        value = where.get(figure.key) if isinstance(where, dict) else None
        if isinstance(value, int):
            yield figure, value
