"""`tidings broker --http`: /metrics scraped as Prometheus would (parsed by prometheus_client's own
parser) and /status as JSON, from real brokers in one overlay after real publishing."""

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tidings import sync
from tidings.testing import BrokerProcess, Cluster
from tidings.testing.broker_process import wait_for

pytestmark = pytest.mark.integration
EVENTS = 25


def get(address, path):
    with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as reply:
        return reply.status, reply.headers["Content-Type"], reply.read().decode()


def scrape(address):
    status, content_type, text = get(address, "/metrics")
    assert status == 200 and content_type.startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def test_metrics_and_status_over_http(tmp_path):
    with Cluster(tmp_path / "c", 2, http=True) as cluster:
        a, b = cluster[0], cluster[1]
        assert a.http_address and b.http_address and a.http_address != a.address
        with sync.connect(b.address) as sub_client, sub_client.subscribe("m/#") as sub:
            cluster.wait(lambda: any(t["name"] == "m/#" and t["member"] for t in (cluster.status(b) or {})
                                     .get("trees", [])), what="b in the tree of m/#")
            with sync.connect(a.address) as pub:
                for i in range(EVENTS):
                    pub.publish(f"m/{i}", b"x")
            got = [sub.get(20) for _ in range(EVENTS)]
            m = scrape(b.http_address)
            assert m[("tidings_subscriptions", ())] == 1 and m[("tidings_clients", ())] == 1
            assert sum(v for (name, _), v in m.items() if name == "tidings_trees") >= 1
            lags = {dict(labels)["pattern"]: v for (name, labels), v in m.items()
                    if name == "tidings_subscription_lag_ticks"}
            assert lags == {"m/#": 0}  # live: handed each event as it becomes durable
            pubends = {dict(labels)["pubend"] for (name, labels) in m if name == "tidings_subscription_lag_ticks"}
            assert {a.pubend, b.pubend} <= pubends  # the other broker's stream too, not only b's own log
            queued = [dict(labels) for (name, labels) in m if name == "tidings_connection_queued_bytes"]
            assert [q["service"] for q in queued] == ["tidings-client"]
            assert m[("tidings_nacks_sent_total", ())] >= 0 and ("tidings_retransmissions_sent_total", ()) in m
            assert any(name == "tidings_stream_doubt_ticks" for name, _ in m)
        assert len(got) == EVENTS

        m = scrape(a.http_address)
        assert m[("tidings_events_published_total", ())] == EVENTS
        assert m[("tidings_log_records", ())] == EVENTS
        assert m[("tidings_log_bytes", ())] > 0
        per_channel = {dict(labels)["channel"]: v for (name, labels), v in m.items()
                       if name == "tidings_channel_events_published_total"}
        assert per_channel == {f"m/{i}": 1 for i in range(EVENTS)}
        assert m[("tidings_overlay_joined", ())] == 1 and m[("tidings_overlay_leaf_set_nodes", ())] == 1
        info = next(labels for (name, labels) in m if name == "tidings_broker_info")
        assert dict(info) == {"pubend": a.pubend, "node_id": a.node_id, "address": a.address}
        rtts = {dict(labels)["address"]: v for (name, labels), v in m.items() if name == "tidings_peer_rtt_seconds"}
        assert set(rtts) == {b.address} and 0 < rtts[b.address] < 1
        assert any(name == "tidings_peer_messages_sent_total" and v > 0 for (name, _), v in m.items())

        m = scrape(b.http_address)
        assert m[("tidings_events_remote_delivered_total", ())] == EVENTS
        assert m[("tidings_events_published_total", ())] == 0
        assert m[("tidings_events_delivered_total", ())] + m[("tidings_events_remote_delivered_total", ())] >= EVENTS

        status, content_type, text = get(a.http_address, "/status")
        st = json.loads(text)
        assert status == 200 and content_type.startswith("application/json")
        assert st["pubend"] == a.pubend and st["events_published"] == EVENTS
        assert st["overlay"]["joined"] and st["peers"][0]["address"] == b.address

        with pytest.raises(urllib.error.HTTPError) as err:
            get(a.http_address, "/nothing")
        assert err.value.code == 404


def test_http_is_off_by_default_and_checked(tmp_path, broker):
    assert broker.http_address is None
    out = subprocess.run([sys.executable, "-m", "tidings.cli.main", "broker", "--data", str(tmp_path / "x"),
                          "--http", "nowhere"], capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 2 and out.stderr.startswith("tidings: error: --http: broker address must be HOST:PORT")


# ---- the dashboard's inspector: a closed page gives back its slot, connection and subscription ----

INSPECT_WAIT_S = 20


def open_inspector(address, pattern="quiet/#"):
    """An inspector stream over a real HTTP connection: the socket once the broker says
    `subscribed`, or the status line it answered instead (the socket closed)."""
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=INSPECT_WAIT_S)
    sock.sendall(f"GET /dashboard/inspect?pattern={urllib.parse.quote(pattern)} HTTP/1.1\r\n"
                 f"Host: {address}\r\n\r\n".encode())
    seen = b""
    deadline = time.monotonic() + INSPECT_WAIT_S
    while b"event: subscribed" not in seen:
        chunk = sock.recv(4096)
        if not chunk or time.monotonic() > deadline:
            sock.close()
            return seen.split(b"\r\n", 1)[0].decode()
        seen += chunk
        if seen.startswith(b"HTTP/1.1 503"):
            sock.close()
            return seen.split(b"\r\n", 1)[0].decode()
    return sock


def inspectors_gone(broker):
    st = broker.status()
    return st["subscriptions"] == 0 and not any(c["service"] == "tidings-dashboard" for c in st["connections"])


def test_closed_inspector_pages_give_back_their_slots(tmp_path):
    """Three rounds of INSPECTORS_MAX pages on a pattern nobody publishes on, each closed: every
    round gets its eight (24 in all), a ninth beside eight open ones is refused, and after each
    close the broker's subscriptions and the dashboard's client connections are back to before."""
    from tidings.aio.dashboard import INSPECTORS_MAX

    with BrokerProcess(tmp_path / "b", http=True) as b:
        assert inspectors_gone(b)
        for _ in range(3):
            pages = [open_inspector(b.http_address) for _ in range(INSPECTORS_MAX)]
            assert all(isinstance(p, socket.socket) for p in pages), pages
            assert b.status()["subscriptions"] == INSPECTORS_MAX
            assert open_inspector(b.http_address) == "HTTP/1.1 503 Service Unavailable"
            for p in pages:
                p.close()
            wait_for(lambda: inspectors_gone(b), INSPECT_WAIT_S, interval=0.1,
                     what="the closed inspectors' subscriptions and connections gone")
        last = open_inspector(b.http_address)
        assert isinstance(last, socket.socket)
        last.close()


def test_the_process_and_its_garbage_collector_in_metrics(tmp_path):
    """A broker's GC passes are rare (aio/collector.py): 20,000 events published and delivered took
    40 young passes at CPython's default threshold (700), and none at the broker's 50,000."""
    broker = BrokerProcess(tmp_path / "b", http=True).start()
    try:
        before = scrape(broker.http_address)
        assert before[("process_resident_memory_bytes", ())] > 0 and ("process_cpu_seconds_total", ()) in before
        with sync.connect(broker.address) as client, client.subscribe("gc/#") as sub:
            for start in range(0, 20_000, 500):
                client.publish_many([(f"gc/{i % 7}", b"x" * 100) for i in range(start, start + 500)])
            got = [sub.get(20) for _ in range(20_000)]
        assert len(got) == 20_000
        after = scrape(broker.http_address)
        young = ("python_gc_collections_total", (("generation", "0"),))
        assert after[young] - before[young] < 10, after[young] - before[young]
    finally:
        broker.stop()
