"""The broker's HTTP endpoint (`--http HOST:PORT`): `/metrics` for Prometheus, `/status` as JSON,
and the live dashboard (`/`, `/dashboard`: aio/dashboard.py).

aiohttp serves it on the broker's own event loop, so a request reads the core's state between two
inputs, never in the middle of one: no locks, no torn counters, and nothing on the hot path (the
counters already exist in the core; this module only reads them). `/metrics` is written by
prometheus_client from a registry holding one collector, `BrokerCollector`, which turns the broker's
status into typed metric families at scrape time: counters end in `_total`, gauges carry their unit
in their name, peers and trees carry labels. A status key the core does not report (a broker
outside any overlay has no peers) is simply absent from the scrape.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable, Iterator
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from tidings.aio.dashboard import ClusterView, Dashboard

PREFIX = "tidings_"
# status key -> (metric name without prefix, help); each a count since the broker started
COUNTERS = {
    "events_published": ("events_published", "events logged by this broker's pubend (acknowledged)"),
    "events_rejected": ("events_rejected", "published events this broker refused"),
    "events_delivered": ("events_delivered", "events delivered to this broker's subscribers"),
    "read_span_bytes": ("read_span_bytes", "bytes of the log sent to bulk readers as they are (SPAN), whose events "
                        "are not counted in events_delivered"),
    "events_remote_delivered": ("events_remote_delivered",
                                "events from other brokers' pubends delivered to this broker's subscribers"),
    "peer_messages_rejected": ("peer_messages_rejected", "malformed messages from other brokers"),
    "leases_expired": ("leases_expired", "subscription leases that ran out (their subscriptions were removed)"),
    "dedup_duplicates": ("publish_duplicates", "idempotent publishes answered with an earlier tick, not logged"),
    "dedup_forgotten_early": ("dedup_entries_evicted",
                              "dedup entries forgotten before their time by dedup_entries_max or dedup_producers_max"),
    "pfs_records_written": ("pfs_records_written", "PFS records: ticks that matched a durable registration here"),
    "pfs_catchups": ("pfs_catchups", "durable catchups the PFS told which ticks matched them"),
    "pfs_ticks_silenced": ("pfs_ticks_silenced", "ticks durable catchups did not fetch (the PFS said no match)"),
}
# status key -> (metric name without prefix, help); each a current value
GAUGES = {
    "clients": ("clients", "client connections open"),
    "leases_held": ("leases_held", "client connections holding a subscription lease"),
    "subscriptions": ("subscriptions", "subscriptions of this broker's clients"),
    "subscriptions_live": ("subscriptions_live", "subscriptions receiving live events"),
    "catchup_readers": ("subscriptions_catching_up", "subscriptions reading the log to catch up"),
    "blocked_connections": ("connections_blocked", "connections whose send queue is full"),
    "partial_frame_bytes": ("partial_frame_bytes", "bytes held in partial frames, of partial_frames_bytes_max"),
    "pending_sync_batches": ("pending_sync_batches", "publish batches written but not yet fsynced"),
    "pending_sync_bytes": ("pending_sync_bytes", "bytes written but not yet fsynced"),
    "paused_publishers": ("publishers_paused", "publishers not read until the disk catches up"),
    "log_bytes": ("log_bytes", "size of the pubend log on disk"),
    "log_records": ("log_records", "events held in the pubend log"),
    "first_tick": ("log_first_tick", "the oldest retained tick (microseconds since the epoch)"),
    "last_tick": ("log_last_tick", "the newest durable tick (microseconds since the epoch)"),
    "released_through": ("log_released_through_tick", "ticks up to this one were released by retention"),
    "dedup_producers": ("dedup_producers", "producers with entries in the idempotent-publish window"),
    "dedup_entries": ("dedup_entries", "entries (runs of consecutive producer sequences) in the window"),
    "dedup_horizon": ("dedup_horizon_tick", "idempotent publishes logged at or below this tick are forgotten"),
    "pfs_streams": ("pfs_streams", "(tree, pubend) streams the PFS records"),
}


class BrokerCollector(Collector):
    """The broker's status as Prometheus metric families, computed at each scrape."""

    def __init__(self, status: Callable[[], dict[str, Any]]) -> None:
        self._status = status

    def collect(self) -> Iterator[Metric]:
        st = self._status()
        for key, (name, text) in COUNTERS.items():
            if isinstance(st.get(key), int):
                yield CounterMetricFamily(PREFIX + name, text, value=st[key])
        for key, (name, text) in GAUGES.items():
            if isinstance(st.get(key), int):
                yield GaugeMetricFamily(PREFIX + name, text, value=st[key])
        overlay = st.get("overlay")
        info = {"pubend": str(st.get("pubend", ""))}
        if overlay:
            info |= {"node_id": str(overlay.get("node_id")), "address": str(overlay.get("address"))}
            yield from _overlay(overlay)
        yield InfoMetricFamily(PREFIX + "broker", "this broker's pubend, node id and address", value=info)
        if "peers" in st:
            yield from _peers(st["peers"])
        if "peer_refusals" in st:
            yield _peer_refusals(st["peer_refusals"])
        if "trees" in st:
            yield from _trees(st["trees"])
        if "delivery" in st:
            yield from _delivery(st["delivery"])
        yield from _connections(st.get("connections") or [])
        yield from _channels(st.get("channels") or {})
        yield _client_errors(st.get("client_errors") or {})


def _overlay(overlay: dict[str, Any]) -> Iterator[Metric]:
    yield GaugeMetricFamily(PREFIX + "overlay_joined", "1 when this broker is in the overlay",
                            value=1 if overlay.get("joined") else 0)
    yield GaugeMetricFamily(PREFIX + "overlay_leaf_set_nodes", "nodes in the Pastry leaf set",
                            value=len(overlay.get("leaf_set") or []))
    yield GaugeMetricFamily(PREFIX + "overlay_routing_table_entries", "filled Pastry routing-table entries",
                            value=sum(overlay.get("routing_table_fill") or []))
    yield GaugeMetricFamily(PREFIX + "overlay_neighbours", "nodes in the proximity neighbourhood set",
                            value=len(overlay.get("neighbours") or []))
    if isinstance(overlay.get("routes_over_hops_max"), int):
        yield CounterMetricFamily(PREFIX + "overlay_routes_over_hops_max",
                                  "routes delivered where they stood after route_hops_max hops",
                                  value=overlay["routes_over_hops_max"])


def _peers(peers: list[dict[str, Any]]) -> Iterator[Metric]:
    labels = ["address", "node_id"]
    rtt = GaugeMetricFamily(PREFIX + "peer_rtt_seconds", "round-trip time to another broker", labels=labels)
    queued = GaugeMetricFamily(PREFIX + "peer_queued_bytes", "bytes queued for another broker", labels=labels)
    sent = CounterMetricFamily(PREFIX + "peer_messages_sent", "messages sent to another broker", labels=labels)
    received = CounterMetricFamily(PREFIX + "peer_messages_received", "messages received from another broker",
                                   labels=labels)
    states = GaugeMetricFamily(PREFIX + "peers", "links to other brokers, by state", labels=["state"])
    by_state: dict[str, int] = {}
    for p in peers:
        values = [str(p.get("address")), str(p.get("node_id") or "")]
        by_state[str(p.get("state"))] = by_state.get(str(p.get("state")), 0) + 1
        if isinstance(p.get("rtt_ms"), int | float):
            rtt.add_metric(values, p["rtt_ms"] / 1000)
        for family, key in ((queued, "queued_bytes"), (sent, "sent"), (received, "received")):
            if isinstance(p.get(key), int):
                family.add_metric(values, p[key])
    for state, count in sorted(by_state.items()):
        states.add_metric([state], count)
    yield from (rtt, queued, sent, received, states)


def _peer_refusals(refusals: dict[str, dict[str, int]]) -> Metric:
    """Peer handshakes refused (core/links/peer_links.py), by the side this broker played and the reason."""
    family = CounterMetricFamily(PREFIX + "peer_refusals", "peer handshakes that ended without a link: side "
                                 "acceptor (this broker refused a broker that dialled it) or dialler (the broker "
                                 "it dialled refused it, or failed its check), and why", labels=["side", "reason"])
    for side, reasons in sorted(refusals.items()):
        for reason, count in sorted(reasons.items()):
            family.add_metric([side, reason], count)
    return family


def _trees(trees: list[dict[str, Any]]) -> Iterator[Metric]:
    roles = GaugeMetricFamily(PREFIX + "trees", "multicast trees this broker is in, by role", labels=["role"])
    by_role: dict[str, int] = {}
    for t in trees:
        by_role[str(t.get("role"))] = by_role.get(str(t.get("role")), 0) + 1
    for role, count in sorted(by_role.items()):
        roles.add_metric([role], count)
    yield roles


# reliability node status key -> (metric name without prefix, help); counts since the broker started
DELIVERY_COUNTERS = {
    "nacks_sent": ("nacks_sent", "nacks this broker sent upstream for ticks it lacked"),
    "nack_ticks_sent": ("nack_ticks_sent", "ticks asked for in the nacks this broker sent"),
    "retransmissions_sent": ("retransmissions_sent", "knowledge this broker retransmitted from its cache"),
    "peer_errors": ("delivery_messages_rejected", "malformed delivery messages from other brokers"),
    "total_order_late": ("total_order_late_events", "events that reached a total-order merge too late"),
}
SOURCE_COUNTERS = {
    "nacks_received": ("nacks_received", "nacks this broker's pubend received"),
    "ticks_retransmitted": ("ticks_retransmitted", "ticks this broker's pubend re-sent from its log"),
    "records_read": ("nack_records_read", "records this broker's pubend read back from its log to answer nacks"),
}


def _delivery(delivery: dict[str, Any]) -> Iterator[Metric]:
    source = delivery.get("source") or {}
    for values, table in ((delivery, DELIVERY_COUNTERS), (source, SOURCE_COUNTERS)):
        for key, (name, text) in table.items():
            if isinstance(values.get(key), int):
                yield CounterMetricFamily(PREFIX + name, text, value=values[key])
    lag = GaugeMetricFamily(PREFIX + "stream_doubt_ticks", "ticks between what a stream delivered (its horizon) "
                            "and the newest tick it knows of, per tree and pubend", labels=["tree", "pubend"])
    cache = GaugeMetricFamily(PREFIX + "stream_cache_bytes", "knowledge cached for retransmission, per tree and "
                              "pubend", labels=["tree", "pubend"])
    for ist in delivery.get("istreams") or []:
        values = [str(ist.get("tree")), str(ist.get("pubend"))]
        if isinstance(ist.get("top"), int) and isinstance(ist.get("horizon"), int):
            lag.add_metric(values, max(0, ist["top"] - ist["horizon"]))
        if isinstance(ist.get("cache_bytes"), int):
            cache.add_metric(values, ist["cache_bytes"])
    yield from (lag, cache)


def _connections(connections: list[dict[str, Any]]) -> Iterator[Metric]:
    queued = GaugeMetricFamily(PREFIX + "connection_queued_bytes", "bytes queued for a client connection, not "
                               "yet written", labels=["conn", "service", "instance"])
    blocked = GaugeMetricFamily(PREFIX + "connection_blocked", "1 when a client connection's send queue is full",
                                labels=["conn", "service", "instance"])
    lag = GaugeMetricFamily(PREFIX + "subscription_lag_ticks", "ticks a subscription has yet to be handed, per "
                            "pubend (this broker's own: position to durable tail; another's: its stream's newest "
                            "known tick less the subscription's position)", labels=["conn", "sub", "pattern", "pubend"])
    for c in connections:
        labels = [str(c.get("conn")), str(c.get("service")), str(c.get("instance"))]
        if isinstance(c.get("queued_bytes"), int):
            queued.add_metric(labels, c["queued_bytes"])
        blocked.add_metric(labels, 1 if c.get("blocked") else 0)
        for sub in c.get("subscriptions") or []:
            by_pubend = sub.get("lag_by_pubend")
            if not isinstance(by_pubend, dict):  # not in an overlay: only its own pubend
                by_pubend = {"": sub["lag_ticks"]} if isinstance(sub.get("lag_ticks"), int) else {}
            for pubend, ticks in by_pubend.items():
                lag.add_metric([str(c.get("conn")), str(sub.get("sub")), str(sub.get("pattern")), str(pubend)], ticks)
    yield from (queued, blocked, lag)


def _channels(channels: dict[str, int]) -> Iterator[Metric]:
    family = CounterMetricFamily(PREFIX + "channel_events_published", "events this broker logged per channel "
                                 "(the busiest channels; the rest under channel=\"(other)\")", labels=["channel"])
    for channel, count in channels.items():
        family.add_metric([channel], count)
    yield family


def _client_errors(by_reason: dict[str, int]) -> Metric:
    """Every refusal of a client, by its error code (core/broker/refusals.py): a code added later is a
    new label value, counted with no change here."""
    family = CounterMetricFamily(PREFIX + "client_errors", "refusals of clients (an ERROR about what the client "
                                 "sent: bad frames and messages, handshakes, auth, limits, access), by error code",
                                 labels=["reason"])
    for reason, count in by_reason.items():
        if isinstance(count, int):
            family.add_metric([str(reason)], count)
    return family


class HttpEndpoint:
    """`/metrics`, `/status` and the dashboard for one broker, on `host:port` (port 0: a free one, see
    `address`); the dashboard reaches the broker, and through it the cluster, at `broker_address`."""

    def __init__(self, status: Callable[[], dict[str, Any]], host: str, port: int, broker_address: str,
                 client_tls: ssl.SSLContext | None = None) -> None:
        self._status = status
        self.host = host
        self.port = port
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(status))
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/status", self._status_json)
        self.view = ClusterView(status, broker_address, client_tls)
        Dashboard(self.view, client_tls).add_routes(app)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port, reuse_address=True).start()
        self.port = self._runner.addresses[0][1]  # the bound port, when 0 was asked for

    async def stop(self) -> None:
        await self._runner.cleanup()  # ends the dashboard's streams; the last one closes the view
        await self.view.close()

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _status_json(self, request: web.Request) -> web.Response:
        return web.Response(text=json.dumps(self._status()) + "\n", content_type="application/json")
