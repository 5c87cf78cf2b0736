"""The broker's HTTP endpoint (`--http HOST:PORT`): `/metrics` for Prometheus, `/status` as JSON,
and the live dashboard (`/`, `/dashboard`: aio/dashboard.py).

aiohttp serves it on the broker's own event loop, so a request reads the core's state between two
inputs, never in the middle of one: no locks, no torn counters, and nothing on the hot path (the
counters already exist in the core; this module only reads them). `/metrics` is written by
prometheus_client from a registry holding one collector, `BrokerCollector`, which turns the broker's
status into typed metric families at scrape time: each figure as core/broker/metrics.py declares it
(counters end in `_total`, gauges carry their unit in their name); peers, trees, connections,
channels and refusals carry labels. prometheus_client's own collectors add the process
(`process_cpu_seconds_total`, `process_resident_memory_bytes`, ...) and the garbage collector's
passes (`python_gc_collections_total{generation}`). A status key the core does not report (a broker
outside any overlay has no peers) is simply absent from the scrape.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable, Iterator
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, GCCollector, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from tidings.aio.dashboard import ClusterView, Dashboard
from tidings.core.broker import metrics
from tidings.core.mqtt.figures import FIGURES as MQTT_FIGURES

PREFIX = "tidings_"


class BrokerCollector(Collector):
    """The broker's status as Prometheus metric families, computed at each scrape."""

    def __init__(self, status: Callable[[], dict[str, Any]]) -> None:
        self._status = status

    def collect(self) -> Iterator[Metric]:
        st = self._status()
        sections = (metrics.FIGURES, *((MQTT_FIGURES,) if "mqtt" in st else ()))  # (core/mqtt/figures.py)
        for figures in sections:
            for figure, value in metrics.reported(st, figures):  # each declared once (core/broker/metrics.py)
                family = CounterMetricFamily if figure.kind is metrics.COUNTER else GaugeMetricFamily
                yield family(PREFIX + figure.name, figure.help, value=value)
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
            yield from _streams(st["delivery"])
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


def _streams(delivery: dict[str, Any]) -> Iterator[Metric]:
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
        GCCollector(registry=self.registry)  # python_gc_*: the collector's passes (aio/collector.py)
        ProcessCollector(registry=self.registry)  # process_*: CPU seconds, resident memory, open fds
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
