"""`tidings status` for people: the broker's status (`--json` prints it raw, for machines) as a
summary, then its connections with their subscriptions, busiest channels, overlay, peers, trees,
delivery counters and auth. Ticks are shown as ISO times (a tick is microseconds since the epoch),
sizes in B/KiB/MiB, the routing table as a fill count. A status key this module does not know of
(a newer broker) is still printed, as `key: value`, never dropped."""

from __future__ import annotations

from typing import Any

from tidings.core.event import tick_to_datetime

SUMMARY_KEYS = {"pubend", "clients", "subscriptions", "subscriptions_live", "catchup_readers", "blocked_connections",
                "events_published", "events_rejected", "events_delivered", "events_remote_delivered",
                "read_span_bytes", "peer_refusals",
                "peer_messages_rejected", "pending_sync_batches", "pending_sync_bytes", "paused_publishers",
                "first_tick", "last_tick", "last_event_tick", "tick_marks", "released_through", "log_bytes",
                "log_records", "leases_held",
                "leases_expired", "lease_ns", "draining", "durable_registrations", "durable_away",
                "durable_expired", "durable_moved", "client_errors"}
SECTION_KEYS = ("connections", "channels", "overlay", "peers", "trees", "delivery", "auth",
                "durable_named", "directory", "mqtt")  # durable_named: `tidings durable list`


def render_status(status: dict[str, Any]) -> str:
    lines = _summary(status)
    lines += [f"{key.replace('_', ' ')}: {value}" for key, value in status.items()
              if key not in SUMMARY_KEYS and key not in SECTION_KEYS]
    if "connections" in status:
        lines += _connections(status["connections"])
    if status.get("channels"):
        lines += _table("busiest channels (events published here)", ["channel", "events"],
                        [[ch, n] for ch, n in status["channels"].items()])
    if "overlay" in status:
        lines += _overlay_lines(status["overlay"])
    if "peers" in status:
        lines += _table(f"peers ({len(status['peers'])})",
                        ["address", "node", "state", "rtt", "queued", "sent", "received"],
                        [[p["address"], _short(p.get("node_id")), p["state"], _ms(p.get("rtt_ms")),
                          size(p.get("queued_bytes")), p.get("sent"), p.get("received")] for p in status["peers"]])
    if "trees" in status:
        lines += _table(f"trees ({len(status['trees'])})", ["tree", "key", "role", "parent", "children"],
                        [[t["name"], _short(t.get("key")), t.get("role") or "-", t.get("parent"),
                          ", ".join(t.get("children") or []) or "-"] for t in status["trees"]])
    if "delivery" in status:
        lines += _delivery(status["delivery"])
    if "auth" in status:
        lines += _auth_lines(status["auth"])
    if "mqtt" in status:  # the MQTT connections (core/mqtt/gateway.py)
        mqtt = status["mqtt"]
        lines.append(f"mqtt: {mqtt.get('connections')} connections open, {mqtt.get('publishes_received')} publishes "
                     f"received, {mqtt.get('publishes_delivered')} delivered, {mqtt.get('refusals')} refused")
        sessions = mqtt.get("sessions") or []
        lines += _table(f"mqtt sessions ({len(sessions)})",
                        ["conn", "client id", "identity", "version", "subscriptions", "inflight", "queued"],
                        [[m.get("conn"), m.get("client_id"), m.get("identity") or "-", m.get("version"),
                          m.get("subscriptions"), m.get("deliveries_in_flight"), m.get("deliveries_queued")]
                         for m in sessions])
    if status.get("directory"):
        lines += _table(f"pubend directory ({len(status['directory'])})",
                        ["pubend", "address", "durable through", "newest event", "released through", "events"],
                        [[d.get("pubend"), d.get("address"), iso_tick(d.get("tail")),
                          iso_tick(d.get("last_event_tick")), iso_tick(d.get("released_through")), d.get("records")]
                         for d in status["directory"]])
    return "\n".join(lines) + "\n"


def size(n: Any) -> str:
    """Bytes for a person: B below 1 KiB, then KiB and MiB with one decimal."""
    if not isinstance(n, int):
        return "-"
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"


def iso_tick(tick: Any) -> str:
    """A tick (microseconds since the epoch) as an ISO time in UTC; 0 means none yet."""
    if not isinstance(tick, int) or tick <= 0:
        return "none"
    return tick_to_datetime(tick).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def _summary(st: dict[str, Any]) -> list[str]:
    remote = st.get("events_remote_delivered")
    rows = [
        ("pubend", st.get("pubend")),
        ("clients", f"{st.get('clients')} connected, {st.get('blocked_connections')} with a full send queue"),
        ("subscriptions", f"{st.get('subscriptions')} ({st.get('subscriptions_live')} live, "
                          f"{st.get('catchup_readers')} catching up from the log)"),
        ("events", f"{st.get('events_published')} published here, {st.get('events_rejected')} rejected, "
                   f"{st.get('events_delivered')} delivered" + ("" if remote is None else
                                                                f", {remote} of them from other brokers")),
        ("log", f"{st.get('log_records')} events, {size(st.get('log_bytes'))}" + (
            f", from {iso_tick(st.get('first_tick'))} to {iso_tick(st.get('last_event_tick'))}"
            if st.get("log_records") else "")
         + f"; durable through {iso_tick(st.get('last_tick'))}"),
        ("released", f"through {iso_tick(st.get('released_through'))} (release protocol and retention)"),
        ("awaiting fsync", f"{st.get('pending_sync_batches')} batches, {size(st.get('pending_sync_bytes'))}; "
                           f"{st.get('paused_publishers')} publishers paused"),
    ]
    if "leases_held" in st:
        lease_s = st.get("lease_ns", 0) / 1e9
        rows.append(("leases", f"{st['leases_held']} connections hold one ({lease_s:g} s, renewed by their "
                               f"clients), {st.get('leases_expired', 0)} expired since the start"))
    if "durable_registrations" in st:
        rows.append(("durable", f"{st['durable_registrations']} durable subscriptions hosted, {st.get('durable_away')} "
                                f"of them away (holding release); {st.get('durable_moved')} moved to other brokers, "
                                f"{st.get('durable_expired')} expired"))
    if st.get("draining"):
        rows.append(("draining", "yes: clients are advised to move, then the broker stops"))
    refused = st.get("client_errors")
    if isinstance(refused, dict):  # core/broker/refusals.py: by error code
        told = ", ".join(f"{n} {code}" for code, n in refused.items())
        rows.append(("refused", f"clients: {told}" if told else "no client was refused"))
    if st.get("peer_messages_rejected"):
        rows.append(("rejected", f"{st['peer_messages_rejected']} malformed messages from other brokers"))
    refusals = st.get("peer_refusals") or {}
    said = [f"{whom}: " + ", ".join(f"{reason} {count}" for reason, count in refusals[side].items())
            for side, whom in (("acceptor", "refused brokers that dialled it"),
                               ("dialler", "refused by brokers it dialled")) if refusals.get(side)]
    if said:
        rows.append(("refusals", "; ".join(said) + " (peer handshakes, see the log)"))
    width = max(len(k) for k, _ in rows)
    return [f"{k:<{width}}  {v}" for k, v in rows]


def _connections(connections: list[dict[str, Any]]) -> list[str]:
    lines = _table(f"connections ({len(connections)})", ["conn", "service", "instance", "identity", "queued",
                                                           "send queue"],
                   [[c.get("conn"), c.get("service"), c.get("instance"), c.get("identity"),
                     size(c.get("queued_bytes")), "full" if c.get("blocked") else "ok"] for c in connections])
    subs = [(c, s) for c in connections for s in c.get("subscriptions") or []]
    return lines + _table(f"subscriptions ({len(subs)})", ["conn", "sub", "pattern", "filter", "mode", "lag"],
                          [[c.get("conn"), s.get("sub"), s.get("pattern"), s.get("filter") or "-", s.get("mode"),
                            _lag(s.get("lag_ticks"))] for c, s in subs])


def _lag(ticks: Any) -> str:
    """Ticks are microseconds of publishing time: a lag reads as the time it spans."""
    if not isinstance(ticks, int):
        return "-"
    return f"{ticks} ticks ({ticks / 1e6:.3f} s)"


def _delivery(delivery: dict[str, Any]) -> list[str]:
    """The reliability node's counters (core/reliability/node.py), each on its own line."""
    source = delivery.get("source") or {}
    rows = [
        ("streams", f"{len(delivery.get('istreams') or [])} trees x pubends received, "
                    f"{source.get('trees', 0)} trees of this pubend sent"),
        ("nacks", f"{delivery.get('nacks_sent', 0)} sent ({delivery.get('nack_ticks_sent', 0)} ticks asked for), "
                  f"{source.get('nacks_received', 0)} received"),
        ("retransmissions", f"{delivery.get('retransmissions_sent', 0)} sent from cache, "
                            f"{source.get('ticks_retransmitted', 0)} ticks re-sent from the log"),
        ("rejected", f"{delivery.get('peer_errors', 0)} malformed delivery messages"),
    ]
    if delivery.get("total_order_late"):
        rows.append(("total order", f"{delivery['total_order_late']} events too late for the merge"))
    width = max(len(k) for k, _ in rows)
    return ["", "delivery", *(f"  {k:<{width}}  {v}" for k, v in rows)]


def _auth_lines(auth: dict[str, Any]) -> list[str]:
    """Who is connected and what was refused (core/auth/guard.py)."""
    identities = auth.get("identities") or {}
    summary = (f"anonymous clients {'allowed' if auth.get('anonymous_allowed') else 'refused'}, "
               f"{auth.get('identities_known', 0)} identities known, {auth.get('rules', 0)} rules, "
               f"{auth.get('refusals', 0)} refusals")
    return ["", "auth", f"  {summary}", *_table("identities", ["identity", "connections", "refusals"],
                                                 [[name, i.get("connections"), i.get("refusals")]
                                                  for name, i in identities.items()])[1:]]


def _short(node_id: Any) -> str:
    return node_id[:8] if isinstance(node_id, str) else "-"


def _overlay_lines(overlay: dict[str, Any]) -> list[str]:
    leaf_set = overlay.get("leaf_set") or []
    neighbours = overlay.get("neighbours") or []
    fill = overlay.get("routing_table_fill") or []
    rows = [
        ("node id", overlay.get("node_id")),
        ("address", overlay.get("address")),
        ("joined", "yes" if overlay.get("joined") else "no"),
        (f"leaf set ({len(leaf_set)})", "  ".join(f"{_short(n[0])}@{n[1]}" for n in leaf_set) or "-"),
        ("routing table", f"{sum(fill)} of its entries filled, in {sum(1 for n in fill if n)} of "
                          f"{len(fill)} rows"),
        (f"neighbours ({len(neighbours)})",
         "  ".join(f"{_short(n[0])}@{n[1]} {n[2]:.2f} ms" for n in neighbours) or "-"),
    ]
    rows += [(k.replace("_", " "), v) for k, v in overlay.items()
             if k not in ("node_id", "address", "joined", "leaf_set", "routing_table_fill", "neighbours")]
    width = max(len(k) for k, _ in rows)
    return ["", "overlay", *(f"  {k:<{width}}  {v}" for k, v in rows)]


def _table(title: str, header: list[str], rows: list[list[Any]]) -> list[str]:
    if not rows:
        return ["", title, "  (none)"]
    cells = [header, *[["-" if v is None else str(v) for v in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return ["", title, *("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                         for r in cells)]
