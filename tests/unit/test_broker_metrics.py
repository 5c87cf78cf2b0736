"""The broker's figures (core/broker/metrics.py): each declared once, documented, read into /status
from the machine that keeps it, and written to /metrics from the same declaration."""

import random
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tidings.aio.http import PREFIX, BrokerCollector
from tidings.core.broker.metrics import COUNTER, FIGURES

from .core_harness import Harness

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
# what /status held before the registry (docs/operations.md), for a lone broker in an overlay
STATUS_KEYS = {
    "pubend", "clients", "draining", "subscriptions", "subscriptions_live", "catchup_readers", "durable_registrations",
    "durable_away", "durable_expired", "durable_moved", "durable_named", "pfs_streams", "pfs_records_written",
    "pfs_catchups", "pfs_ticks_silenced", "leases_held", "leases_expired", "lease_ns", "blocked_connections",
    "partial_frame_bytes", "events_published", "events_rejected", "events_delivered", "read_span_bytes",
    "pending_sync_batches", "pending_sync_bytes", "paused_publishers", "dedup_producers", "dedup_entries",
    "dedup_horizon", "dedup_duplicates", "dedup_forgotten_early", "first_tick", "last_tick", "last_event_tick",
    "released_through", "log_bytes", "log_records", "tick_marks", "channels", "connections", "overlay", "trees",
    "delivery", "peers", "peer_refusals", "events_remote_delivered", "peer_messages_rejected", "client_errors", "auth",
    "directory", "directory_pubends", "directory_rejected", "directory_refused", "directory_aged_out",
    "directory_forgotten",
}


def metric_name(figure):
    return PREFIX + figure.name + ("_total" if figure.kind is COUNTER else "")


def test_each_figure_is_declared_once_and_documented():
    assert len({f.key for f in FIGURES if not f.under}) == len([f for f in FIGURES if not f.under])
    assert len({f.name for f in FIGURES}) == len(FIGURES)
    doc = DOCS.read_text()
    assert [metric_name(f) for f in FIGURES if metric_name(f) not in doc] == []


def test_status_keeps_its_keys_and_reads_each_figure_from_its_owner():
    h = Harness()
    outside = h.broker.status()
    assert "events_remote_delivered" not in outside and "peer_messages_rejected" not in outside  # no overlay
    h.apply(h.broker.start_overlay(0, "127.0.0.1:7400", None, random.Random(1)))
    h.connect(1)
    h.subscribe(1, "a/#")
    h.publish(1, *[("a/b", b"x", {})] * 3)
    h.sync()
    st = h.broker.status()
    assert set(st) == STATUS_KEYS
    assert (st["events_published"], st["events_delivered"], st["clients"], st["subscriptions"]) == (3, 3, 1, 1)
    for figure in FIGURES:
        where = st
        for part in figure.under:
            where = where[part]
        assert isinstance(where[figure.key], int), figure


def test_metrics_come_from_the_same_declarations():
    h = Harness()
    h.apply(h.broker.start_overlay(0, "127.0.0.1:7400", None, random.Random(1)))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(h.broker.status))
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
    st = h.broker.status()
    for figure in FIGURES:
        where = st
        for part in figure.under:
            where = where[part]
        if where[figure.key] is None:  # (a fresh log has no first tick)
            assert PREFIX + figure.name not in families
            continue
        family = families[PREFIX + figure.name]
        assert (family.type, family.documentation) == (figure.kind.value, figure.help)
        assert family.samples[0].value == where[figure.key]
