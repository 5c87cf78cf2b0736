"""RemoteDelivery: each local subend's share of another pubend's records (reliability/subend.py).
Records come from untrusted peers: one that does not name the pubend whose stream carried it is
counted and dropped."""

from __future__ import annotations

import msgpack

from tidings.core.filters import parse_filter
from tidings.core.reliability.node import DeliverRecords
from tidings.core.subscription.subend import RemoteDelivery, Subend


def record(tick: int, channel: str, attributes: dict, pubend: str = "p-remote") -> bytes:
    return msgpack.packb([pubend, tick, channel, attributes, "svc", "i", b"x"])


def subends() -> dict[int, Subend]:
    return {1: Subend(1, 10, 1, "nodes/#", None, 0, None),
            2: Subend(2, 10, 2, "nodes/+/load", parse_filter("value > 5"), 0, None),
            3: Subend(3, 11, 1, "other/#", None, 0, None)}


def test_each_subend_gets_the_records_matching_its_pattern_and_filter_in_order():
    r = RemoteDelivery()
    recs = [record(1, "nodes/h1/load", {"value": 9}), record(2, "nodes/h1/mem", {}),
            record(3, "nodes/h2/load", {"value": 1}), record(4, "nodes/h2/load", {"value": 7})]
    fan = r.fan(DeliverRecords("nodes/#", (1, 2, 3), ("p-remote",) * 4, recs), subends())
    assert fan == {1: recs, 2: [recs[0], recs[3]]}
    assert (r.events_delivered, r.records_rejected) == (6, 0)


def test_only_the_keys_named_and_still_present_get_records():
    r = RemoteDelivery()
    recs = [record(1, "nodes/h1/load", {"value": 9})]
    s = subends()
    del s[1]  # ended while the knowledge was on its way
    assert r.fan(DeliverRecords("nodes/#", (1, 3), ("p-remote",), recs), s) == {}
    assert r.fan(DeliverRecords("nodes/#", (2,), ("p-remote",), recs), s) == {2: recs}
    assert r.events_delivered == 1


def test_records_of_another_pubend_or_malformed_are_counted_and_dropped():
    r = RemoteDelivery()
    good = record(2, "nodes/h1/mem", {})
    recs = [record(1, "nodes/h1/mem", {}, pubend="p-impostor"), b"\xc1garbage", good]
    fan = r.fan(DeliverRecords("nodes/#", (1,), ("p-remote",) * 3, recs), subends())
    assert fan == {1: [good]}
    assert (r.events_delivered, r.records_rejected) == (1, 2)
