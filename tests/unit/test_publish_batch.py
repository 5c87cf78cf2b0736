"""The intake's one pass over a PUBLISH (core/publish/batch.py): the compiled form (_batch.c) and the
Python form give the same answer for any input, the Python form encodes as `encode_records` does,
and a broker publishes the same records and answers through either. A PUBLISH read in place from
its frame (`scan`, `encode_frame`) is decoded and encoded as msgpack and the Python pass would, for
any frame body: well formed, malformed, of other shapes or not msgpack at all."""

from __future__ import annotations

import gc
import importlib.util
import os
import random
import shutil
import struct
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.asan import run_under_asan, sanitized
from tidings.core.auth.guard import Guard
from tidings.core.auth.policy import AuthPolicy, Limits
from tidings.core.auth.rules import PUBLISH, AccessRules, Rule
from tidings.core.effects import Append, Sync
from tidings.core.errors import ProtocolError
from tidings.core.event import encode_records
from tidings.core.inputs import Received
from tidings.core.publish import batch
from tidings.core.wire import decoders, messages
from tidings.core.wire.frames import frame
from tidings.storage import record

from .core_harness import Harness, delivered, of_type, refused

ASAN_BUILD = sanitized("TIDINGS_TEST_BATCH_ASAN", "_batch")  # _batch.c built with ASan (test_..._under_asan)
if ASAN_BUILD is not None:
    batch._batch = ASAN_BUILD
COMPILED = batch._batch is not None

# examples per comparison: under a second in make test; make soak runs the long form
EXAMPLES = 200
SOAK_EXAMPLES = 5000
SLOW_OK = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])

KNOWN = ["a/b", "nodes/h1/load", "x" * 31, "y" * 32, "z" * 255, "w" * 256, "é/ü", "日本/チャンネル"]


def test_the_compiled_pass_is_built_where_it_can_be() -> None:
    """setup.py builds it where a C compiler is found; a build that broke there must not pass
    unseen as a slower intake."""
    built = importlib.util.find_spec("tidings.core.publish._batch") is not None
    assert built or shutil.which("cc") is None, "the compiled pass (setup.py) failed to build: see pip's output"


text = st.one_of(st.sampled_from(["", "p-1", "svc", "a" * 40, "ü" * 100, "q" * 300]), st.text(max_size=40))
payloads = st.one_of(st.binary(max_size=40), st.sampled_from([b"x" * 255, b"x" * 256, b"x" * 65535, b"x" * 65536]))
channels = st.one_of(st.sampled_from(KNOWN), st.sampled_from(["unknown", "a/b/c"]), st.text(max_size=8))
good_event = st.builds(lambda ch, pl: [ch, {}, pl], st.sampled_from(KNOWN), payloads)
odd_event = st.one_of(
    st.builds(lambda ch, pl: [ch, {"k": 1}, pl], channels, payloads),  # attributes
    st.builds(lambda ch, pl: (ch, {}, pl), channels, payloads),  # a tuple, not a list
    st.builds(lambda ch, pl: [ch, {}, pl, 1], channels, payloads),  # four fields
    st.builds(lambda ch, pl: [ch, {}, bytearray(pl)], channels, payloads),  # not bytes
    st.builds(lambda ch, pl: [ch.encode(), {}, pl], channels, payloads),  # a binary channel
    st.builds(lambda ch, pl: [ch, None, pl], channels, payloads),  # nil attributes
    st.builds(lambda ch, pl: [ch, {}, pl], channels, payloads),  # maybe an unknown channel
    st.sampled_from([None, 7, "s", [], ["a/b", {}]]),
    st.just(["a/\ud800", {}, b""]),  # not UTF-8 (a known channel below)
)
ticks = st.one_of(st.integers(0, 2**16 + 10), st.integers(2**32 - 5, 2**32 + 5), st.integers(1_700_000_000_000_000,
                  1_700_000_000_000_100), st.integers(2**63 - 20, 2**63 + 5), st.integers(-3, -1))


def encode_both(data: st.DataObject) -> None:
    events: list[object] = data.draw(st.lists(st.one_of(good_event, good_event, good_event, odd_event), max_size=12))
    if data.draw(st.booleans()):  # most PUBLISHes are all good
        events = data.draw(st.lists(good_event, max_size=12))
    known: dict[str, Any] = dict.fromkeys([*KNOWN, "a/\ud800"], None)
    size_max = data.draw(st.sampled_from([0, 40, 256, 65536, 1 << 20]))
    args = (events, known, size_max, data.draw(text), data.draw(ticks), data.draw(text), data.draw(text),
            data.draw(st.booleans()))
    python = batch.encode_python(*args)
    native = batch._native(*args) if COMPILED else None
    if COMPILED:
        assert native == python
        # the ACK of such a run, packed in C (also under ASan: the long run below)
        seq, first = data.draw(st.integers(0, 2**64 - 1)), data.draw(st.integers(0, 2**64 - 1 - len(events)))
        acked = list(range(first, first + len(events) + 1))
        assert batch._batch.ack_run(batch.ACK_TYPE, seq, args[3], first, len(acked)) == messages.ack(seq, args[3],
                                                                                                       acked)
    if python is None:
        return
    records, deliveries, size, channel, acked, table = python
    pairs = encode_records(msgpack.Packer().pack, args[3], args[4], events, args[5], args[6], args[7])  # type: ignore[arg-type]
    assert acked == [t for t, _ in pairs]
    assert records == [rec for _, rec in pairs]
    assert size == sum(len(rec) for rec in records)
    # the batch record's table, as the log writes it for these records (storage/record.py)
    assert table == (record._batch_body(records, None)[:4 + 4 * len(records)] if records else None)
    names = {ev[0] for ev in events}  # type: ignore[index]
    assert channel == (names.pop() if len(names) == 1 else None)
    # a one-channel batch is held as its records (PendingBatch.records): no per-event tuple beside them
    assert deliveries == (None if channel is not None else
                          [(t, ev[0], ev[1], rec) for (t, rec), ev in zip(pairs, events, strict=True)])  # type: ignore[index]


def test_the_table_is_none_past_a_batch_records_bytes() -> None:
    """A batch whose record would pass BATCH_BYTES_MAX gets no table (the log cuts it: record.py)."""
    class Sized(bytes):  # a record's length without its bytes
        def __len__(self) -> int:
            return record.BATCH_BYTES_MAX - 7 - self[0]

    assert batch.BATCH_BYTES_MAX == record.BATCH_BYTES_MAX
    assert batch.batch_table([Sized(b"\0")]) is None
    assert batch.batch_table([Sized(b"\1")]) == struct.pack("<II", 1, record.BATCH_BYTES_MAX - 8)


def test_a_run_reads_as_its_pairs() -> None:
    run = batch.RecordRun([5, 6, 7], [b"a", b"b", b"c"], None)
    assert list(run) == [(5, b"a"), (6, b"b"), (7, b"c")] and len(run) == 3
    assert run[0] == (5, b"a") and run[-1] == (7, b"c") and run[1:] == [(6, b"b"), (7, b"c")]
    assert run == [(5, b"a"), (6, b"b"), (7, b"c")] and run != [(5, b"a")]
    runs = batch.RecordRuns([run, batch.RecordRun([9], [b"d"], None)])
    assert list(runs) == [*run, (9, b"d")] and len(runs) == 4 and runs.runs[0] is run
    assert runs[0] == (5, b"a") and runs[3] == runs[-1] == (9, b"d") and runs[2:] == [(7, b"c"), (9, b"d")]
    with pytest.raises(IndexError):
        runs[4]
    assert batch.merged(run, batch.RecordRun([9], [b"d"], None)) == runs
    more = batch.RecordRun([10], [b"e"], None)
    assert batch.merged(runs, more) is runs and runs.runs[-1] is more and len(runs) == 5
    assert batch.merged([(5, b"a")], run) is None  # (a list: an Append checked event by event)


@settings(SLOW_OK, max_examples=EXAMPLES)
@given(st.data())
def test_the_compiled_and_python_passes_agree_and_encode_as_encode_records(data: st.DataObject) -> None:
    encode_both(data)


@pytest.mark.soak
@settings(SLOW_OK, max_examples=SOAK_EXAMPLES)
@given(st.data())
def test_the_compiled_and_python_passes_agree_for_long(data: st.DataObject) -> None:
    encode_both(data)


def test_the_pass_decides_nothing_about_odd_events() -> None:
    known: dict[str, Any] = {"a/b": None}
    good = ["a/b", {}, b"x"]
    for odd in (["a/b", {"k": 1}, b"x"], ["c", {}, b"x"], ["a/b", {}, b"xx"], ("a/b", {}, b"x"), ["a/b", {}, "x"]):
        assert batch.encode_python([good, odd], known, 1, "p", 5, "s", "i", False) is None
        if COMPILED:
            assert batch._native([good, odd], known, 1, "p", 5, "s", "i", False) is None
    assert batch.encode_python([], known, 1, "p", 5, "s", "i", False) is None


@pytest.fixture(params=["compiled", "python"])
def native(request: pytest.FixtureRequest) -> Iterator[str]:
    """The test once through the compiled pass, once through the Python one."""
    if request.param == "compiled" and not COMPILED:
        pytest.skip("the compiled pass is not built here")
    was = batch.native()
    batch.use_native(request.param == "compiled")
    yield request.param
    batch.use_native(was)


def published(h: Harness) -> tuple[list[tuple[int, bytes]], list[Any], list[Any]]:
    """Two PUBLISHes (the first makes its channels known, the second takes the one pass), one
    with a bad event, one with attributes; what was logged and what publisher and subscriber got."""
    h.connect(1)
    h.connect(2)
    sub = h.subscribe(2, "a/#")
    h.inbox(1)
    h.inbox(2)
    h.publish(1, ("a/b", b"one", {}), ("a/c", b"two", {}))
    h.publish(1, ("a/b", b"three", {}), ("a/b", b"four", {}), ("a/c", b"five", {}))
    h.publish(1, ("a/b", b"six", {}), ("a/b", b"seven", {"k": 1}))
    h.send(1, frame(msgpack.packb([messages.ClientType.PUBLISH, 9, [["a/b", {}, b"ok"], ["a/b", {}, 5]]])))
    h.sync()
    got = h.inbox(1)
    assert [t for _, t in delivered(h.inbox(2))] == [t for t, _ in h.records] and sub
    return h.records, got, [refused(got)]


def test_a_broker_logs_and_answers_the_same_through_either_pass(native: str) -> None:
    records, got, _ = published(Harness())
    python_records, python_got, _ = published_with(False)
    assert records == python_records
    assert got == python_got
    acks = of_type(got, messages.Ack)
    assert [len(a.ticks) for a in acks] == [2, 3, 2, 2] and acks[-1].ticks[1] is None


def published_with(on: bool) -> tuple[list[tuple[int, bytes]], list[Any], list[Any]]:
    was = batch.native()
    batch.use_native(on)
    try:
        return published(Harness())
    finally:
        batch.use_native(was)


def test_an_inputs_publishes_are_appended_and_synced_once(native: str) -> None:
    """Several PUBLISHes read from one input (the common read of test (a)) leave one Append of their
    runs, each its own batch record, and one Sync; each PUBLISH is acknowledged with its own ticks
    once that is durable. One with a bad event, or keyed (idempotent), is appended on its own."""
    h = Harness()
    s = h.connect(1)
    h.inbox(1)
    h.publish(1, ("a/b", b"learn", {}))  # (the channel's first PUBLISH: checked event by event)
    h.sync()
    h.inbox(1)
    wires = [wire for n in (3, 1, 2) for _, _, wire in s.publish([s.check_event("a/b", b"p%d" % i, {})
                                                                  for i in range(n)])]
    effects = h.broker.handle(Received(h.now, h.wall_us + 1, 1, b"".join(wires)))
    appends = [e for e in effects if isinstance(e, Append)]
    syncs = [e for e in effects if isinstance(e, Sync)]
    assert len(appends) == len(syncs) == 1 and appends[0].token == syncs[0].token
    assert isinstance(appends[0].records, batch.RecordRuns) and len(appends[0].records.runs) == 3
    h.apply(effects)
    h.sync()
    acks = of_type(h.inbox(1), messages.Ack)
    assert [a.ticks for a in acks] == [[t for t, _ in h.records[1:4]], [h.records[4][0]], [t for t, _ in h.records[5:]]]
    before = len(h.records)  # a bad event in the second PUBLISH: the first is appended alone, then the second
    bad = [s.publish([s.check_event("a/b", b"ok", {})])[0][2], frame(msgpack.packb(
        [messages.ClientType.PUBLISH, 99, [["a/b", {}, b"fine"], ["a/b", {}, 5]]]))]
    effects = h.broker.handle(Received(h.now, h.wall_us + 2, 1, b"".join(bad)))
    assert [type(e) for e in effects if isinstance(e, Append | Sync)] == [Append, Sync, Append, Sync]
    h.apply(effects)
    h.sync()
    assert len(h.records) == before + 2


@settings(SLOW_OK, max_examples=EXAMPLES)
@given(seq=st.integers(0, 2**64 - 1), pubend=st.text(max_size=300), first=st.integers(0, 2**64 - 1),
       count=st.integers(1, 70_000))
def test_the_ack_of_a_run_is_messages_ack_of_its_ticks(seq: int, pubend: str, first: int, count: int) -> None:
    """batch.ack_run, compiled and in Python, packs exactly what messages.ack packs for the ticks."""
    first = min(first, 2**64 - count)
    expected = messages.ack(seq, pubend, list(range(first, first + count)))
    assert batch.ACK_TYPE == messages.ClientType.ACK
    was = batch.native()
    try:
        for on in (True, False):
            batch.use_native(on)
            assert batch.ack_run(seq, pubend, first, count) == expected
    finally:
        batch.use_native(was)


def test_the_compiled_pass_leaves_its_tuples_to_the_collector_untracked() -> None:
    """A batch's (tick, channel, {}, record) tuples live until it is durable:
    the young collections should not walk them (they hold nothing a cycle could go through)."""
    if not COMPILED:
        pytest.skip("the compiled pass is not built here")
    known = {"a/b": None, "c": None}
    encoded = batch._native([["a/b", {}, b"x"], ["c", {}, b"y"]], known, 10, "p", 5, "s", "i", False)
    assert encoded is not None
    records, deliveries, _, _, _, _ = encoded
    assert deliveries is not None and not any(gc.is_tracked(t) for t in [*records, *deliveries])
    one = batch._native([["a/b", {}, b"x"], ["a/b", {}, b"y"]], known, 10, "p", 5, "s", "i", False)
    assert one is not None and one[1] is None and not any(gc.is_tracked(t) for t in one[0])


@pytest.mark.soak
def test_the_compiled_pass_under_address_sanitizer(tmp_path: Any) -> None:
    """_batch.c built with AddressSanitizer and UBSan, the long Hypothesis comparison run against it
    in a child Python (libasan preloaded; CPython's own allocations are not leak-checked)."""
    run_under_asan(tmp_path, os.path.join(os.path.dirname(batch.__file__), "_batch.c"), "TIDINGS_TEST_BATCH_ASAN",
                   f"{__file__}::test_the_compiled_and_python_passes_agree_for_long")


# ---- a PUBLISH read in place from its frame (batch.scan, batch.encode_frame) --------------------------


def loose(value: object, rng: random.Random) -> bytes:
    """`value` as msgpack, each header at random either the smallest (as msgpack packs it) or a
    wider one that is as valid: what another client library may send."""
    wide = rng.random() < 0.5
    if type(value) is list:
        head = struct.pack(">BH", 0xdc, len(value)) if wide else _array_head(len(value))
        return head + b"".join(loose(v, rng) for v in value)
    if type(value) is dict and wide:
        return struct.pack(">BH", 0xde, len(value)) + b"".join(loose(k, rng) + loose(v, rng) for k, v in value.items())
    if type(value) is str and wide:
        raw = value.encode("utf-8", "surrogatepass")
        return struct.pack(">BI", 0xdb, len(raw)) + raw
    if type(value) is bytes and wide:
        return struct.pack(">BI", 0xc6, len(value)) + value
    if type(value) is int and wide and 0 <= value < 2**64:
        return struct.pack(">BQ", 0xcf, value)
    return bytes(msgpack.packb(value))


def _array_head(n: int) -> bytes:
    return bytes([0x90 | n]) if n < 16 else struct.pack(">BH", 0xdc, n) if n < 0x10000 else struct.pack(">BI", 0xdd, n)


def mutated(body: bytes, rng: random.Random) -> bytes:
    """`body` with one change: cut short, a byte changed, a byte inserted, or bytes after its end."""
    at = rng.randrange(len(body) + 1)
    how = rng.randrange(4)
    if how == 0:
        return body[:at]
    if how == 1 and at < len(body):
        return body[:at] + bytes([rng.randrange(256)]) + body[at + 1:]
    if how == 2:
        return body[:at] + bytes([rng.randrange(256)]) + body[at:]
    return body + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4)))


seqs = st.one_of(st.integers(0, 300), st.integers(0, 300), st.integers(0, 2**16 + 2), st.integers(0, 2**32 + 2),
                 st.integers(2**63 - 2, 2**64 + 2), st.integers(-300, -1))
channels_ascii = st.one_of(st.sampled_from(KNOWN[:6]), st.sampled_from(["a/b", "b/a", "a/a"]),
                           st.text(alphabet="ab/", max_size=4), st.text(alphabet="ab/é", max_size=3))


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    """A PUBLISH frame body, most of them in the common shape, many not."""
    if draw(st.sampled_from([True, True, True, False])):
        events: list[object] = draw(st.lists(st.builds(lambda ch, pl: [ch, {}, pl], channels_ascii, payloads),
                                             max_size=12))
    else:
        events = draw(st.lists(st.one_of(good_event, odd_event), max_size=12))
    message: list[object] = [messages.ClientType.PUBLISH, draw(seqs), events]
    shape = draw(st.sampled_from(["plain", "plain", "plain", "loose", "loose", "mutated", "producer", "other",
                                  "bytes"]))
    if shape == "producer":
        message.append(draw(text))
    elif shape == "other":
        message[0] = draw(st.sampled_from([messages.ClientType.SUBSCRIBE, 0, 127, 200, -1]))
    elif shape == "bytes":
        return draw(st.binary(max_size=40))
    try:
        body = bytes(msgpack.packb(message))
    except (ValueError, OverflowError, UnicodeEncodeError):  # a seq msgpack cannot pack, a surrogate
        return draw(st.binary(max_size=40))
    rng = draw(st.randoms(use_true_random=False))
    if shape == "loose":
        return loose(message, rng)
    if shape == "mutated":
        return mutated(body, rng)
    return body


def decoded(body: bytes, on: bool) -> object:
    """What the decoder makes of `body`, with the compiled pass `on` or off: a message, or the
    error's code and text."""
    was = batch.native()
    batch.use_native(on)
    try:
        return decoders.decode_client_message(body)
    except ProtocolError as exc:
        return exc.code, str(exc), exc.fatal
    finally:
        batch.use_native(was)


def read_in_place_as_decoded(data: st.DataObject) -> None:
    body = data.draw(bodies())
    python = decoded(body, False)
    native = decoded(body, True)
    assert not isinstance(python, messages.Publish) or python.frame is None  # (the Python path decodes all)
    if not isinstance(native, messages.Publish) or native.frame is None:
        assert native == python
        return
    assert isinstance(python, messages.Publish)  # scan took it: msgpack decodes it to the same message
    assert (native.seq, native.producer, native.count) == (python.seq, None, len(python.events))
    assert all(type(ev) is list and [type(v) for v in ev] == [str, dict, bytes] and ev[1] == {}
               for ev in python.events)
    names = [ev[0] for ev in python.events]  # type: ignore[index]
    if data.draw(st.sampled_from([False, False, False, True])):  # (most on known channels: records are built)
        names = data.draw(st.lists(channels_ascii, max_size=4)) + KNOWN[:3]
    known: dict[str, Any] = dict.fromkeys(names, None)
    args = (known, data.draw(st.sampled_from([0, 40, 256, 65536])), data.draw(text), data.draw(ticks),
            data.draw(text), data.draw(text), data.draw(st.booleans()))
    assert native.frame is not None
    expected = batch.encode_python(python.events, *args)
    assert batch.encode_frame(native.frame, native.at, native.count, *args) == expected
    assert native == python and native.events == python.events  # (decoded only now, when asked)


@settings(SLOW_OK, max_examples=EXAMPLES * 2)
@given(st.data())
def test_a_publish_read_in_place_is_the_one_msgpack_decodes_and_encodes_the_same(data: st.DataObject) -> None:
    read_in_place_as_decoded(data)


@pytest.mark.soak
@settings(SLOW_OK, max_examples=SOAK_EXAMPLES)
@given(st.data())
def test_a_publish_read_in_place_is_the_one_msgpack_decodes_for_long(data: st.DataObject) -> None:
    read_in_place_as_decoded(data)


def test_the_client_librarys_publish_is_read_in_place_and_decoded_only_when_asked() -> None:
    if not COMPILED:
        pytest.skip("the compiled pass is not built here")
    events = [["a/b", {}, b"x" * 100] for _ in range(100)]
    body = messages.publish(7, events)[4:]  # (the frame's header off)
    msg = decoders.decode_client_message(body)
    assert isinstance(msg, messages.Publish) and msg.frame == body and msg.count == 100 and msg.seq == 7
    assert msg._events is None
    assert batch.scan(bytearray(body)) is None  # type: ignore[arg-type]  # (kept: must not change under it)
    encoded = batch.encode_frame(msg.frame, msg.at, msg.count, {"a/b": None}, 100, "p", 9, "s", "i", False)
    assert encoded is not None and encoded[3] == "a/b" and msg._events is None
    assert msg.events == events
    for other in ([["a/b", {"k": 1}, b"x"]], [["é", {}, b"x"]], [["a/b", {}, "x"]], []):  # left to msgpack
        assert decoders.decode_client_message(messages.publish(7, other)[4:]).frame is None  # type: ignore[union-attr]
    assert decoders.decode_client_message(messages.publish(7, events, "producer")[4:]).frame is None  # type: ignore[union-attr]


def test_a_frame_on_several_channels_is_encoded_as_its_decoded_events() -> None:
    """Runs of channels of the same length, alternating, and one unknown channel after known ones."""
    known: dict[str, Any] = dict.fromkeys(["a/b", "b/a", "a/a", "c"], None)
    for names in (["a/b", "b/a"], ["a/b", "a/b", "b/a", "a/b"], ["c", "a/a", "a/a", "c"], ["a/b", "a/b", "a/c"]):
        events: list[object] = [[name, {}, bytes([i])] for i, name in enumerate(names)]
        body = messages.publish(3, events)[4:]
        msg = decoders.decode_client_message(body)
        assert isinstance(msg, messages.Publish)
        if COMPILED:
            assert msg.frame is not None
        args = (known, 10, "p", 5, "s", "i", True)
        expected = batch.encode_python(events, *args)
        assert batch.encode_frame(body, msg.at, len(events), *args) == expected
        assert (expected is None) == ("a/c" in names)


def guards() -> dict[str, Guard | None]:
    """An open broker, one whose rules refuse a channel, one with a publish rate of 5 events a second."""
    rules = AccessRules([Rule("anonymous", PUBLISH, True, "a/#"), Rule("anonymous", PUBLISH, True, "x/#")])
    return {"open": None,
            "rules": Guard(AuthPolicy({}, rules, None, True, Limits()), lambda n: b"n" * n),
            "rate": Guard(AuthPolicy({}, AccessRules([]), None, True, Limits(publish_events_per_s=5)),
                          lambda n: b"n" * n)}


def broker_run(bodies_sent: list[bytes], guard: str, on: bool) -> tuple[list[tuple[int, bytes]], list[bytes]]:
    """The records a broker logs and the bytes it sends its publisher for `bodies_sent` (a PUBLISH
    that makes two channels known first), through the compiled pass or the Python one."""
    was = batch.native()
    batch.use_native(on)
    try:
        h = Harness(guard=guards()[guard])
        h.connect(1)
        h.inbox(1)
        h.publish(1, ("a/b", b"first", {}), (KNOWN[3], b"first", {}))
        for body in bodies_sent:
            h.send(1, frame(body))
            h.sync()
            h.run_until(h.now + 2 * h.broker.config.refusal_window_ns)  # (refusals held, rates refilled)
        return h.records, h.sent.get(1, [])
    finally:
        batch.use_native(was)


@settings(SLOW_OK, max_examples=EXAMPLES // 4)
@given(st.lists(bodies(), min_size=1, max_size=4), st.sampled_from(["open", "open", "rules", "rate"]))
def test_a_broker_logs_and_answers_any_publish_frame_the_same_through_either_pass(sent: list[bytes],
                                                                                   guard: str) -> None:
    assert broker_run(sent, guard, True) == broker_run(sent, guard, False)


@pytest.mark.soak
@pytest.mark.timeout(1200)  # (the sanitized child is several times slower than the plain build)
def test_the_frame_pass_under_address_sanitizer(tmp_path: Any) -> None:
    """scan and encode_frame (_batch.c) built with AddressSanitizer and UBSan, the long comparison
    of frames read in place run against them."""
    run_under_asan(tmp_path, os.path.join(os.path.dirname(batch.__file__), "_batch.c"), "TIDINGS_TEST_BATCH_ASAN",
                   f"{__file__}::test_a_publish_read_in_place_is_the_one_msgpack_decodes_for_long")
