"""The compiled decoder (tidings/spark/_columns.c) against the Python one: on any bytes, usual records,
unusual ones and garbage, a read gives the same rows or the same error with it as without it; and
it really decodes the usual records itself rather than leaving them all to Python."""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from tidings.spark import arrow  # noqa: E402
from tidings.spark.arrow import EVENT_SCHEMA, RecordsError, arrow_schema  # noqa: E402
from tidings.storage import record  # noqa: E402

if arrow._columns is None:
    pytest.skip("the compiled decoder is not built here (setup.py: no C compiler or zlib headers)",
                allow_module_level=True)

COMPILED = arrow._columns
SOME = arrow_schema(EVENT_SCHEMA.__class__([EVENT_SCHEMA["tick"], EVENT_SCHEMA["channel"]]))


def usual_values(width: int) -> st.SearchStrategy[Any]:
    return st.one_of(st.text(max_size=6), st.booleans(), st.floats(width=width),
                     st.integers(min_value=-(2**63), max_value=2**64 - 1))


ODD_VALUES = st.one_of(st.none(), st.binary(max_size=3), st.lists(st.integers(-9, 9), max_size=2))


def outcome(read: Any) -> Any:
    """What a read gives: its rows and last tick, or its error."""
    try:
        result = read()
    except RecordsError as exc:
        return "error", str(exc)
    batch, last = result if isinstance(result, tuple) else (result, None)
    return (None if batch is None else (batch.schema, batch.to_pylist())), last


def both(read: Any) -> tuple[Any, Any]:
    """The outcome of `read` with the compiled decoder, and with the Python decoder alone."""
    try:
        compiled = outcome(read)
        arrow._columns = None
        return compiled, outcome(read)
    finally:
        arrow._columns = COMPILED


@st.composite
def bodies(draw: st.DrawFn, usual: bool) -> tuple[list[bytes], list[int]]:
    """Event bodies as logged, and their ticks (often runs of consecutive ones: batch records);
    `usual`: what brokers log (str, int, float and bool attributes, a bytes payload, the
    authenticated flag or not: records of both kinds side by side), else now and then anything
    msgpack holds, in any of its forms, and a ninth element."""
    ticks = sorted(draw(st.sets(st.integers(min_value=1, max_value=60), min_size=1, max_size=12)))
    if draw(st.booleans()):  # one run of consecutive ticks: one batch record
        ticks = list(range(ticks[0], ticks[0] + len(ticks)))
    out = []
    for tick in ticks:
        single = draw(st.booleans())  # floats packed in 32 bits (which then hold only such floats)
        values = usual_values(32 if single else 64)
        values = values if usual else st.one_of(values, ODD_VALUES)
        attributes = draw(st.dictionaries(st.text(max_size=4), values, max_size=4))
        fields: list[Any] = ["pe-1", tick, draw(st.sampled_from(["nodes/a/load", "nodes/b/cpu", "q/é"])), attributes,
                             "agent", draw(st.sampled_from(["a-1", "ü" * 40])), draw(st.binary(max_size=300))]
        fields += draw(st.sampled_from([[], [True], [False]]))  # stamped by the broker: absent is false
        if not usual and draw(st.integers(0, 19)) == 0:
            fields.append(draw(st.sampled_from([True, 0, None])))  # one element too many
        if not usual and draw(st.integers(0, 9)) == 0:  # one field of another type or value
            at = draw(st.integers(0, len(fields) - 1))
            fields[at] = draw(st.one_of(st.text(max_size=3), st.integers(-3, 2**64 - 1), st.binary(max_size=3),
                                        st.none(), st.floats(width=32),
                                        st.dictionaries(st.integers(0, 3), st.text(), max_size=2)))
        binary = usual or draw(st.booleans())  # else the payload (bytes) is packed as a str
        out.append(msgpack.packb(fields, use_single_float=single, use_bin_type=binary))
    return out, ticks


def records_blob(items: list[bytes]) -> bytes:
    return b"\xdd" + struct.pack(">I", len(items)) + b"".join(items)


def span_of(items: list[bytes], ticks: list[int], keyed: bool, batch: bool = True) -> bytes:
    """The log's bytes for `items` at `ticks`: batch records (a single record where a run is one
    event long), or with `batch` False single records only, as logs before batches held them."""
    keys = [b"k%d" % t for t in ticks] if keyed else None
    return record.encode(list(zip(ticks, items, strict=True)), 0, 0, 1 << 62, 1 << 16, keys, batch=batch)[0]


def mangled(data: bytes, draw: st.DrawFn) -> bytes:
    """`data` with one byte changed, cut short, or left as it is."""
    how = draw(st.sampled_from(["keep", "keep", "flip", "cut"]))
    if how == "keep" or not data:
        return data
    at = draw(st.integers(0, len(data) - 1))
    if how == "cut":
        return data[:at]
    return data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1:]


# examples per comparison: about 1.4 s of CPU each in make test (5 s at 400), 4,000 in make soak
EXAMPLES = 150
SOAK_EXAMPLES = 4000
SLOW_OK = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(SLOW_OK, max_examples=EXAMPLES)
@given(st.data())
def test_a_span_reads_the_same_with_and_without_the_compiled_decoder(data: st.DataObject) -> None:
    span_reads_the_same(data)


@pytest.mark.soak
@settings(SLOW_OK, max_examples=SOAK_EXAMPLES)
@given(st.data())
def test_a_span_reads_the_same_with_and_without_the_compiled_decoder_for_long(data: st.DataObject) -> None:
    span_reads_the_same(data)


def span_reads_the_same(data: st.DataObject) -> None:
    items, ticks = data.draw(bodies(usual=data.draw(st.booleans())))
    blob = mangled(span_of(items, ticks, data.draw(st.booleans()), data.draw(st.booleans())), data.draw)
    after = data.draw(st.integers(0, 61))
    through = data.draw(st.integers(after, 70))
    schema = data.draw(st.sampled_from([arrow_schema(), SOME]))
    pattern = data.draw(st.sampled_from(["#", "nodes/+/load", "q/#"]))
    compiled, python = both(lambda: arrow.span_to_batch(blob, schema, "pe-1", pattern, after, through))
    assert compiled == python


@settings(SLOW_OK, max_examples=EXAMPLES)
@given(st.data())
def test_records_read_the_same_with_and_without_the_compiled_decoder(data: st.DataObject) -> None:
    records_read_the_same(data)


@pytest.mark.soak
@settings(SLOW_OK, max_examples=SOAK_EXAMPLES)
@given(st.data())
def test_records_read_the_same_with_and_without_the_compiled_decoder_for_long(data: st.DataObject) -> None:
    records_read_the_same(data)


def records_read_the_same(data: st.DataObject) -> None:
    items, _ = data.draw(bodies(usual=data.draw(st.booleans())))
    blob = mangled(records_blob(items), data.draw)
    count = len(items) + data.draw(st.sampled_from([0, 0, 0, -1, 1]))
    after = data.draw(st.integers(0, 61))
    end = data.draw(st.integers(after, 70))
    schema = data.draw(st.sampled_from([arrow_schema(), SOME]))
    compiled, python = both(lambda: arrow.records_to_batch(blob, count, schema, "pe-1", after, end))
    assert compiled == python


@settings(max_examples=100, deadline=None)
@given(bodies(usual=True), st.booleans(), st.booleans())
def test_the_compiled_decoder_takes_usual_records_itself(case: tuple[list[bytes], list[int]], keyed: bool,
                                                         batch: bool) -> None:
    items, ticks = case  # read exactly: from before the first tick through the last
    assert arrow._compiled(span_of(items, ticks, keyed, batch), -1, arrow_schema(), "pe-1", ticks[0] - 1,
                           ticks[-1], "#") is not None
    assert arrow._compiled(records_blob(items), len(items), arrow_schema(), "pe-1", ticks[0] - 1, ticks[-1],
                           None) is not None


@pytest.mark.parametrize("odd", [
    pytest.param({"a": 1, "b": 2}, id="(usual: taken)"),
    pytest.param({"a": None}, id="a nil value"),
    pytest.param({"a": b"x"}, id="a bytes value"),
    pytest.param({"a": [1]}, id="a list value"),
    pytest.param({str(n): n for n in range(65)}, id="more than 64 attributes"),
])
@pytest.mark.parametrize(("flag", "usual"), [([], True), ([True], True), ([False], True), ([1], False),
                                             ([None], False), ([True, True], False)])
def test_what_the_compiled_decoder_leaves_to_python(odd: dict[str, Any], flag: list[Any], usual: bool) -> None:
    body = msgpack.packb(["pe-1", 1, "c", odd, "s", "i", b"", *flag])
    taken = arrow._compiled(records_blob([body]), 1, arrow_schema(), "pe-1", 0, 9, None)
    assert (taken is not None) == (odd == {"a": 1, "b": 2} and usual)


def test_a_repeated_attribute_name_or_bad_utf8_is_left_to_python() -> None:
    body = msgpack.packb(["pe-1", 1, "c", {"a": 1, "b": 2}, "s", "i", b""])
    for raw in (body.replace(b"\xa1b", b"\xa1a"), body.replace(b"\xa1c", b"\xa1\xff")):
        assert arrow._compiled(records_blob([raw]), 1, arrow_schema(), "pe-1", 0, 9, None) is None
        compiled, python = both(lambda raw=raw: arrow.records_to_batch(records_blob([raw]), 1, arrow_schema(),
                                                                       "pe-1", 0, 9))
        assert compiled == python


def test_the_compiled_decoder_reads_the_one_record_definition() -> None:
    """_columns.c keeps its own reading of an event body; its field list and its two lengths are
    EventRecord's (core/event.py)."""
    import re
    from pathlib import Path

    from tidings.core.event import RECORD_LENGTHS, EventRecord

    source = (Path(arrow.__file__).parent / "_columns.c").read_text()
    listed = re.search(r"the msgpack array \[([^\]]+)\]", source)
    assert listed is not None and [f.strip() for f in listed[1].split(",")] == list(EventRecord._fields[:-1])
    lengths = {name: int(value) for name, value in re.findall(r"#define (RECORD_FIELDS\w*) (\d+)", source)}
    assert (lengths["RECORD_FIELDS"], lengths["RECORD_FIELDS_FLAGGED"]) == RECORD_LENGTHS
    assert EventRecord._fields[-1] == "authenticated"
