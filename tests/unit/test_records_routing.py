"""A batch of peers' records checked at once (records_routing_fields) says exactly what checking
each one (record_routing_fields) says: every record's (channel, attributes) when all are
well-formed and from their pubend, else None (and the caller checks them one by one). The compiled
check (_records.c) answers the same where it answers, and answers for every record in the usual
layout; the Python checks alone (its switch off) answer the same too."""

import os
import shutil
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.asan import run_under_asan, sanitized
from tidings.core import event
from tidings.core.event import own_record_prefix, record_routing_fields, records_routing_fields

ASAN_BUILD = sanitized("TIDINGS_TEST_RECORDS_ASAN", "_records")  # _records.c built with ASan (the soak test below)
if ASAN_BUILD is not None:
    event._records = ASAN_BUILD
    event.use_native(True)
COMPILED = event._records is not None
EXAMPLES = 200  # per comparison in make test; make soak runs the long form
SOAK_EXAMPLES = 5000
SLOW_OK = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


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


def test_the_compiled_check_is_built_where_it_can_be():
    """setup.py builds it where a C compiler is found; a build that broke must not pass unseen as a
    slower subscriber's broker."""
    assert COMPILED or shutil.which("cc") is None, "the compiled check (setup.py) failed to build"


@given(batches())
def test_the_python_checks_alone_say_what_each_record_says(batch):
    pubends, records = batch
    saved = event.native()
    event.use_native(False)
    try:
        assert records_routing_fields(pubends, records) == one_by_one(pubends, records)
    finally:
        event.use_native(saved)


BAD_UTF8 = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\xc0\xaf"]
text = st.one_of(st.sampled_from(["", "svc", "a" * 31, "b" * 32, "ü" * 200, "c" * 300, "d" * 70000]),
                 st.text(max_size=12))


@st.composite
def usual_records(draw):
    """A record in the usual layout (any tick, strings, payload size and flag), sometimes with one
    string's bytes made invalid UTF-8 or one byte cut or added, in place."""
    channel = draw(st.sampled_from(["a/b", "nodes/h1/load", "é/ü", "x" * 40, "bad//channel", "#", ""]))
    fields = ["p-1", draw(st.integers(-(2**63), 2**64 - 1)), channel, {}, draw(text), draw(text),
              draw(st.sampled_from([b"", b"x" * 100, b"y" * 300, b"z" * 70000]))]
    fields += draw(st.sampled_from([[], [True], [False]]))
    record = msgpack.packb(fields)
    spoil = draw(st.sampled_from(["none"] * 5 + ["utf8", "cut", "extra", "nil attributes", "float tick"]))
    if spoil == "utf8":
        at = draw(st.sampled_from([2, 4, 5]))  # the channel, service or instance
        bad = draw(st.sampled_from(BAD_UTF8))
        fields[at] = "\x00" * len(bad)  # placeholder bytes, then replaced in place
        record = msgpack.packb(fields)
        placeholder = msgpack.packb(fields[at])
        record = record.replace(placeholder, placeholder[:-len(bad)] + bad, 1)
    elif spoil == "cut":
        record = record[:draw(st.integers(0, len(record) - 1))]
    elif spoil == "extra":
        record += b"\xc0"
    elif spoil == "nil attributes":
        record = msgpack.packb([*fields[:3], None, *fields[4:]])
    elif spoil == "float tick":
        record = msgpack.packb([fields[0], 1.5, *fields[2:]])
    return record


def compared(records: list[bytes]) -> None:
    """The compiled check of `records` (pubend p-1) says None or what the Python checks say, and
    says it for every batch the Python checks take whole in the usual layout."""
    pubends = ("p-1",) * len(records)
    saved = event.native()
    event.use_native(False)
    try:
        python = records_routing_fields(pubends, records)
    finally:
        event.use_native(saved)
    assert python == one_by_one(pubends, records)
    answer = event._records.routing(records, own_record_prefix("p-1"))
    if answer is not None:
        routed, channels = answer
        assert set(channels) == {channel for channel, _ in routed}
    compiled = event._compiled_routing_fields(pubends, records)
    assert compiled is None or compiled == python
    if python is not None and all(msgpack.packb(fields := msgpack.unpackb(r)) == r and fields[3] == {}
                                  for r in records):
        assert compiled is not None  # the usual layout (as msgpack packs it) is always answered


GOOD_USUAL = msgpack.packb(["p-1", 2**40, "a/b", {}, "svc", "i", b"x"])
BAD_SERVICE, BAD_INSTANCE, BAD_CHANNEL = (GOOD_USUAL.replace(b"\xa3svc", b"\xa3s\xc3\x28"),
                                          GOOD_USUAL.replace(b"\xa1i", b"\xa1\xff"),
                                          GOOD_USUAL.replace(b"\xa3a/b", b"\xa3a\xed\xa0"))


@pytest.mark.skipif(not COMPILED, reason="the compiled check is not built here")
@settings(SLOW_OK, max_examples=EXAMPLES)
@given(st.lists(usual_records(), min_size=1, max_size=8))
@example([BAD_SERVICE]).via("a service not UTF-8")
@example([GOOD_USUAL, BAD_INSTANCE]).via("an instance not UTF-8 after a good one")
@example([GOOD_USUAL, BAD_CHANNEL]).via("a channel not UTF-8 after a good one")
@example([GOOD_USUAL, GOOD_USUAL[:-1] + b"\xc4\x01xy"]).via("a byte past the record's end")
def test_the_compiled_check_answers_as_the_python_checks(records):
    compared(records)


@pytest.mark.soak
@pytest.mark.skipif(not COMPILED, reason="the compiled check is not built here")
@settings(SLOW_OK, max_examples=SOAK_EXAMPLES)
@given(st.lists(usual_records(), min_size=1, max_size=8))
def test_the_compiled_check_answers_as_the_python_checks_long(records):
    compared(records)


def test_the_compiled_check_is_off_when_switched_off():
    saved = event.native()
    try:
        event.use_native(False)
        assert not event.native()
        event.use_native(True)
        assert event.native() is COMPILED
    finally:
        event.use_native(saved)


@pytest.mark.soak
def test_the_compiled_check_under_address_sanitizer(tmp_path: Path) -> None:
    """_records.c built with AddressSanitizer and UBSan, the long comparison run against it in a
    child Python (libasan preloaded; CPython's own allocations are not leak-checked)."""
    run_under_asan(tmp_path, os.path.join(os.path.dirname(event.__file__), "_records.c"), "TIDINGS_TEST_RECORDS_ASAN",
                   f"{__file__}::test_the_compiled_check_answers_as_the_python_checks_long")
