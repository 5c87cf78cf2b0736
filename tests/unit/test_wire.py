import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.errors import ProtocolError
from tidings.core.event import event_from_fields
from tidings.core.wire import decoders, messages
from tidings.core.wire.frames import FrameDecoder, frame
from tidings.core.wire.types import ClientType


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=20), st.data())
def test_frames_survive_any_chunking(bodies, data):
    stream = b"".join(frame(b) for b in bodies)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    dec = FrameDecoder(1000)
    out = []
    last = 0
    for cut in [*cuts, len(stream)]:
        out += dec.feed(stream[last:cut])
        last = cut
    assert out == bodies
    assert dec.held_bytes == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=20), st.data())
def test_held_bytes_is_what_arrived_less_what_was_pulled(bodies, data):
    """`held_bytes`, a field kept as the buffer changes, after any mix of pushes, pulls and takes."""
    stream = b"".join(frame(b) for b in bodies)
    dec = FrameDecoder(1000, final=data.draw(st.booleans()))
    arrived = pulled = 0
    while arrived < len(stream) or dec.held_bytes:
        step = data.draw(st.sampled_from(["push", "pull", "take"]))
        if step == "push" and arrived < len(stream):
            cut = data.draw(st.integers(arrived + 1, len(stream)))
            dec.push(stream[arrived:cut])
            arrived = cut
        elif step == "pull":
            body = dec.pull()
            pulled += 0 if body is None else len(frame(body))
        else:  # a take, or a push with nothing left to push
            pulled += sum(len(frame(b)) for b in dec.take())
        assert dec.held_bytes == arrived - pulled
    assert dec.held_bytes == 0 and pulled == len(stream)
    dec.push(frame(b"x" * 2000))  # over the limit: the failure drops what was held
    assert dec.take() == [] and dec.failure is not None and dec.held_bytes == 0


def test_oversized_frame_is_fatal_after_the_frames_before_it():
    dec = FrameDecoder(10)
    assert dec.feed(frame(b"ok") + frame(b"x" * 11) + frame(b"no")) == [b"ok"]
    assert dec.failure is not None and dec.failure.fatal and dec.failure.code == "frame-too-large"
    assert dec.feed(frame(b"more")) == []


def test_events_frame_is_built_from_encoded_records():
    recs = [msgpack.packb(["p1", t, "a/b", {"k": t}, "svc", "i", b"x" * t]) for t in range(1, 40)]
    body = FrameDecoder(1 << 20).feed(messages.events(5, recs))[0]
    msg = decoders.decode_broker_message(body)
    assert isinstance(msg, messages.Events) and msg.sub == 5
    assert [event_from_fields(f).tick for f in msg.records] == list(range(1, 40))
    assert event_from_fields(msgpack.unpackb(recs[3])).attributes == {"k": 4}


@pytest.mark.parametrize("sub", [0, 1, 127, 128, 255, 256, 65_536, 2**40, -1, -32, -33])
@pytest.mark.parametrize("count", [1, 15, 16])
def test_events_frames_are_msgpack_of_the_records_as_they_are(sub, count):
    recs = [msgpack.packb(["p1", t, "a/b", {}, "svc", "i", b"x"]) for t in range(count)]
    expected = frame(msgpack.packb([ClientType.EVENTS, sub, [msgpack.unpackb(r) for r in recs]]))
    assert messages.events_frames(sub, recs) == [expected] and messages.events(sub, recs) == expected


def test_events_frames_cut_a_big_group_commit_in_frames_of_about_the_target():
    recs = [msgpack.packb(["p1", t, "a/b", {}, "svc", "i", b"x" * 1000]) for t in range(3000)]
    frames = messages.events_frames(9, recs)
    assert len(frames) == 3 and all(len(f) <= messages.EVENTS_FRAME_BYTES_TARGET + 64 for f in frames)
    bodies = [FrameDecoder(1 << 24).feed(f)[0] for f in frames]
    got = [r for body in bodies for r in decoders.decode_broker_message(body).records]
    assert got == [msgpack.unpackb(r) for r in recs]


def _size_chunks_reference(records, target):
    """The cut record by record: a run ends before the record that would take it past `target`."""
    if sum(map(len, records)) <= target:
        return [records]
    chunks, start, size = [], 0, 0
    for i, record in enumerate(records):
        if size and size + len(record) > target:
            chunks.append(records[start:i])
            start, size = i, 0
        size += len(record)
    chunks.append(records[start:])
    return chunks


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=60), st.integers(0, 100))
def test_size_chunks_cut_as_record_by_record(sizes, target):
    records = [bytes(n) for n in sizes]
    assert messages.size_chunks(records, target) == _size_chunks_reference(records, target)


@pytest.mark.parametrize("size", [0, 10, 70_000])  # bin32 either way, however short
def test_span_frame_carries_the_log_bytes_as_they_are(size):
    blob = bytes(range(256)) * (size // 256) + bytes(size % 256)
    body = FrameDecoder(1 << 20).feed(messages.span(4, 10, 99, blob))[0]
    assert decoders.decode_broker_message(body) == messages.Span(4, 10, 99, blob)
    with pytest.raises(ProtocolError, match="SPAN blob must be binary"):
        decoders.decode_broker_message(msgpack.packb([ClientType.SPAN, 4, 10, 99, "text"]))


def test_array_header_sizes():
    for n in (0, 15, 16, 65535, 65536):
        recs = [msgpack.packb(1)] * n
        body = FrameDecoder(1 << 24).feed(messages.events(1, recs))[0]
        assert len(decoders.decode_broker_message(body).records) == n


@pytest.mark.parametrize(("body", "code"), [
    (b"\xc1", "bad-message"), (msgpack.packb({"a": 1}), "bad-message"), (msgpack.packb([99]), "unknown-message"),
    (msgpack.packb([ClientType.PUBLISH, -1, []]), "bad-message"),
    (msgpack.packb([ClientType.PUBLISH, 1]), "bad-message"),
    (msgpack.packb([ClientType.SUBSCRIBE, 1, "a", None, ["sometime"], None]), "bad-message"),
    (msgpack.packb([ClientType.SUBSCRIBE, 1, "a", 5, ["now"], None]), "bad-message"),
    (msgpack.packb([ClientType.READ, 1, "a", None, 0, 9, "yes"]), "bad-message"),
])
def test_malformed_client_messages_name_the_problem(body, code):
    with pytest.raises(ProtocolError) as info:
        decoders.decode_client_message(body)
    assert info.value.code == code and not info.value.fatal


def test_client_messages_round_trip():
    dec = FrameDecoder(1 << 20)
    sub = messages.Subscribe(3, "a/#", "x > 1", messages.START_AFTER, 77, 99)
    for wire, expected in [
        (messages.hello("svc", "i"), messages.Hello(1, "svc", "i")),
        (messages.publish(4, [["a", {}, b""]]), messages.Publish(4, [["a", {}, b""]])),
        (messages.subscribe(sub), sub),
        (messages.unsubscribe(3), messages.Unsubscribe(3)),
        (messages.status_request(9), messages.StatusRequest(9)),
        (messages.read(messages.Read(5, "a/#", None, 7, 70)), messages.Read(5, "a/#", None, 7, 70)),
        (messages.read(messages.Read(6, "#", None, 7, 70, True)), messages.Read(6, "#", None, 7, 70, True)),
    ]:
        assert decoders.decode_client_message(dec.feed(wire)[0]) == expected
