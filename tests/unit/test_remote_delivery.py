"""Other pubends' records from the trees for local subscriptions (core/subscription/table.py
`LocalSubscriptions.delivered`, each subscription's share by `Subscription.take`). Records come
from untrusted peers: one that does not name the pubend whose stream carried it is counted and
dropped."""

from __future__ import annotations

import msgpack

from tidings.core.auth.guard import Guard
from tidings.core.effects import Send
from tidings.core.filters import parse_filter
from tidings.core.reliability.node import DeliverRecords
from tidings.core.subscription.table import LocalSubscriptions
from tidings.core.wire import decoders


def record(tick: int, channel: str, attributes: dict, pubend: str = "p-remote") -> bytes:
    return msgpack.packb([pubend, tick, channel, attributes, "svc", "i", b"x"])


def table() -> LocalSubscriptions:
    """Keys 1-3: nodes/# (conn 10, sub 1), nodes/+/load with a filter (conn 10, sub 2), other/# (conn 11)."""
    t = LocalSubscriptions(Guard.open())
    for conn, sub, pattern, flt in ((10, 1, "nodes/#", None), (10, 2, "nodes/+/load", "value > 5"),
                                    (11, 1, "other/#", None)):
        t.joined(t.open(conn, sub, "p-local", pattern, None if flt is None else parse_filter(flt), 0, None,
                        from_oldest=False, total=False, bulk=False, spans=False))
    return t


def got(effects: list) -> list[tuple[int, int, list]]:
    """(conn, sub, records) of each EVENTS frame sent."""
    out = []
    for e in effects:
        assert type(e) is Send
        msg = decoders.decode_broker_message(e.data[4:])
        out.append((e.conn, msg.sub, msg.records))
    return out


def test_each_subscription_gets_the_records_matching_its_pattern_and_filter_in_order():
    t = table()
    recs = [record(1, "nodes/h1/load", {"value": 9}), record(2, "nodes/h1/mem", {}),
            record(3, "nodes/h2/load", {"value": 1}), record(4, "nodes/h2/load", {"value": 7})]
    effects = t.delivered(DeliverRecords("nodes/#", (1, 2, 3), ("p-remote",) * 4, recs))
    decoded = [msgpack.unpackb(r) for r in recs]
    assert got(effects) == [(10, 1, decoded), (10, 2, [decoded[0], decoded[3]])]
    assert (t.remote_delivered, t.events_delivered, t.records_rejected) == (6, 6, 0)


def test_the_effects_leave_in_the_order_of_each_subscriptions_first_record():
    t = table()
    recs = [record(1, "nodes/h1/mem", {}), record(2, "nodes/h1/load", {"value": 9})]
    effects = t.delivered(DeliverRecords("nodes/#", (2, 1), ("p-remote",) * 2, recs))
    assert [(conn, sub) for conn, sub, _ in got(effects)] == [(10, 1), (10, 2)]  # key 1 took record 0


def test_only_the_keys_named_and_still_present_get_records():
    t = table()
    recs = [record(1, "nodes/h1/load", {"value": 9})]
    t.drop(t.subends[1])  # ended while the knowledge was on its way
    assert t.delivered(DeliverRecords("nodes/#", (1, 3), ("p-remote",), recs)) == []
    assert [sub for _, sub, _ in got(t.delivered(DeliverRecords("nodes/#", (2,), ("p-remote",), recs)))] == [2]
    assert t.remote_delivered == 1


def test_records_of_another_pubend_or_malformed_are_counted_and_dropped():
    t = table()
    good = record(2, "nodes/h1/mem", {})
    recs = [record(1, "nodes/h1/mem", {}, pubend="p-impostor"), b"\xc1garbage", good]
    effects = t.delivered(DeliverRecords("nodes/#", (1,), ("p-remote",) * 3, recs))
    assert got(effects) == [(10, 1, [msgpack.unpackb(good)])]
    assert (t.remote_delivered, t.records_rejected) == (1, 2)


def test_subscriptions_under_the_same_sub_id_each_get_their_own_share():
    """Shares are framed once per list of records: two different shares never pass for one."""
    t = LocalSubscriptions(Guard.open())
    for conn, pattern in ((10, "nodes/a/#"), (11, "nodes/b/#"), (12, "nodes/#"), (13, "nodes/#")):
        t.joined(t.open(conn, 1, "p-local", pattern, None, 0, None, from_oldest=False, total=False, bulk=False,
                        spans=False))
    recs = [record(1, "nodes/a/load", {}), record(2, "nodes/b/load", {})]
    a, b = (msgpack.unpackb(r) for r in recs)
    effects = t.delivered(DeliverRecords("nodes/#", (1, 2, 3, 4), ("p-remote",) * 2, recs))
    assert got(effects) == [(10, 1, [a]), (12, 1, [a, b]), (13, 1, [a, b]), (11, 1, [b])]
    assert effects[1].data is effects[2].data  # the whole of it, framed once
