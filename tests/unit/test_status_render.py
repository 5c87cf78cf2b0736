"""`tidings status` for people (cli/status.py): ISO times, sizes, subscriptions, fill counts, and
keys it does not know printed rather than dropped."""

from tidings.cli.status import iso_tick, render_status, size

TICK = 1_795_472_214_518_633  # 2026-11-23T22:16:54.518633Z


def test_sizes_and_times():
    assert [size(n) for n in (0, 1023, 1024, 1536, 3 * 1024 * 1024, None)] == [
        "0 B", "1023 B", "1.0 KiB", "1.5 KiB", "3.0 MiB", "-"]
    assert iso_tick(TICK) == "2026-11-23T22:16:54.518Z" and iso_tick(0) == "none"


def test_a_status_reads_as_sentences_and_tables():
    st = {"pubend": "p1", "clients": 1, "subscriptions": 1, "subscriptions_live": 0, "catchup_readers": 1,
          "blocked_connections": 0, "events_published": 3, "events_rejected": 0, "events_delivered": 2,
          "pending_sync_batches": 0, "pending_sync_bytes": 0, "paused_publishers": 0, "first_tick": TICK,
          "last_tick": TICK + 5, "released_through": 0, "log_bytes": 2048, "log_records": 3,
          "leases_held": 1, "leases_expired": 2, "lease_ns": 30_000_000_000, "draining": False,
          "channels": {"a/b": 3},
          "connections": [{"conn": 4, "service": "svc", "instance": "i1", "identity": "anonymous", "blocked": False,
                           "queued_bytes": 5000, "subscriptions": [
                               {"sub": 1, "pattern": "a/#", "filter": "n > 2", "mode": "catching up",
                                "position": TICK, "lag_ticks": 1_500_000}]}],
          "overlay": {"node_id": "ab" * 16, "address": "h:1", "joined": True, "leaf_set": [],
                      "routing_table_fill": [2, 1, 0, 0], "neighbours": []},
          "something_new": 7}
    text = render_status(st)
    assert "3 events, 2.0 KiB, from 2026-11-23T22:16:54.518Z" in text and str(TICK) not in text
    assert "1 connections hold one (30 s, renewed by their clients), 2 expired" in text
    assert "4.9 KiB" in text  # the connection's queued bytes
    row = next(line for line in text.splitlines() if "a/#" in line)
    assert row.split() == ["4", "1", "a/#", "n", ">", "2", "catching", "up", "1500000", "ticks", "(1.500", "s)"]
    assert "3 of its entries filled, in 2 of 4 rows" in text
    assert "something new: 7" in text and "draining" not in text
    assert "refusals" not in text  # none: not a line


def test_peer_refusals_read_as_one_line():
    text = render_status({"pubend": "p1", "peer_refusals": {
        "acceptor": {"bad-proof": 2, "missing-credential": 5}, "dialler": {"handshake-timeout": 1}}})
    line = next(ln for ln in text.splitlines() if ln.startswith("refusals"))
    assert "refused brokers that dialled it: bad-proof 2, missing-credential 5" in line
    assert "refused by brokers it dialled: handshake-timeout 1" in line and "{" not in text


def test_the_pubend_directory_is_a_table_of_times_and_tick_marks_stay_out():
    st = {"pubend": "p1", "first_tick": TICK, "last_tick": TICK + 9, "last_event_tick": TICK + 5, "log_records": 3,
          "tick_marks": [TICK, TICK + 5],
          "directory": [{"pubend": "p2", "address": "h:2", "tail": TICK + 9, "last_event_tick": TICK + 5,
                         "first_tick": TICK, "released_through": 0, "records": 3, "version": TICK + 9}]}
    text = render_status(st)
    assert "from 2026-11-23T22:16:54.518Z to 2026-11-23T22:16:54.518Z" in text
    row = next(line for line in text.splitlines() if line.split()[:1] == ["p2"])
    assert row.split() == ["p2", "h:2", "2026-11-23T22:16:54.518Z", "2026-11-23T22:16:54.518Z", "none", "3"]
    assert "pubend directory (1)" in text and str(TICK) not in text and "tick marks" not in text
def test_client_refusals_read_by_reason():
    base = {"pubend": "p1", "clients": 0}
    lines = render_status({**base, "client_errors": {"bad-message": 3, "limit-exceeded": 12}}).splitlines()
    assert "refused clients: 3 bad-message, 12 limit-exceeded" in [" ".join(line.split()) for line in lines]
    assert "no client was refused" in render_status({**base, "client_errors": {}})
    assert "refused" not in render_status(base)  # an older broker: no such line
