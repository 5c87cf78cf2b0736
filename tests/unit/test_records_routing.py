"""A batch of peers' records checked at once (records_routing_fields) says exactly what checking
each one (record_routing_fields) says: every record's (channel, attributes) when all are
well-formed and from their pubend, else None (and the caller checks them one by one)."""

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.core import event
from tidings.core.event import record_routing_fields, records_routing_fields


def one_by_one(pubends, records):
    """The reference: each record checked alone; None as soon as one is refused."""
    out = []
    for pubend, record in zip(pubends, records, strict=True):
        fields = record_routing_fields(record)
        if fields is None or fields.pubend != pubend:
            return None
        out.append((fields.channel, fields.attributes))
    return out


GOOD = ["p-1", 2**40, "a/b", {}, "svc", "i", b"x"]
# each a way for one field (or the whole record) to be wrong, or right in an unusual form
FIELD_VALUES = {
    0: ["p-1", "p-2", 1, None, b"p-1"],
    1: [2**40, 0, -1, "1", 1.5, True, None],
    2: ["a/b", "a/c", "", "a//b", "#", "a" * 2000, 1, None, b"a/b"],
    3: [{}, None, {"n": 1}, {"s": "x", "f": 1.5}, {"": 1}, {"n": [1]}, {1: 1}, [], 0, "", False, [["n", 1]]],
    4: ["svc", 1, None],
    6: [b"x", b"", "x", None, 1],
}
EXTRA = [[], [True], [False], [1], [None], [True, True]]


@st.composite
def batches(draw):
    count = draw(st.integers(1, 6))
    pubends, records = [], []
    for _ in range(count):
        fields = list(GOOD)
        fields[1] = draw(st.integers(0, 2**63 - 1))
        if draw(st.booleans()):  # most records are good; some have one field changed
            at = draw(st.sampled_from(sorted(FIELD_VALUES)))
            fields[at] = draw(st.sampled_from(FIELD_VALUES[at]))
        fields += draw(st.sampled_from(EXTRA))
        packed = msgpack.packb(fields)
        damage = draw(st.sampled_from(["none"] * 6 + ["cut", "garbage", "not bytes", "map", "short"]))
        record = {"none": packed, "cut": packed[:-1], "garbage": b"\xc1" + packed, "not bytes": bytearray(packed),
                  "map": msgpack.packb({"a": 1}), "short": msgpack.packb(fields[:6])}[damage]
        records.append(record)
        pubends.append(draw(st.sampled_from(["p-1"] * 4 + ["p-2"])))
    return tuple(pubends), records


@given(batches())
def test_a_batch_says_what_each_record_says(batch):
    pubends, records = batch
    assert records_routing_fields(pubends, records) == one_by_one(pubends, records)


def test_nil_attributes_read_as_none_and_valid_ones_are_kept():
    records = [msgpack.packb(["p-1", 1, "a", None, "svc", "i", b"x"]),
               msgpack.packb(["p-1", 2, "a", {"n": 1}, "svc", "i", b"x", True])]
    assert records_routing_fields(("p-1", "p-1"), records) == [("a", {}), ("a", {"n": 1})]


@pytest.mark.parametrize("pubends", [("p-1",), ("p-1", "p-1", "p-1"), ()])
def test_the_pubends_name_each_record(pubends):
    records = [msgpack.packb(GOOD)] * 2
    assert records_routing_fields(pubends, records) is None
    assert records_routing_fields(("p-1", "p-1"), records) == [("a/b", {})] * 2


@given(batches(), st.integers(1, 4))
def test_a_batch_checked_in_parts_says_what_each_record_says(batch, part):
    pubends, records = batch
    saved, event.CHECK_RECORDS_MAX = event.CHECK_RECORDS_MAX, part
    try:
        assert records_routing_fields(pubends, records) == one_by_one(pubends, records)
    finally:
        event.CHECK_RECORDS_MAX = saved
