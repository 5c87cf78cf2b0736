"""The compiled read of a run of PUBLISH packets (core/mqtt/_publishes.c) takes exactly what the
Python reader takes: on any stream (plain PUBLISHes, PUBLISHes with every field wrong or unusual,
other packets, garbage, cut anywhere, at any Maximum Packet Size, in 3.1.1 and 5.0) the decoder's
`take_publishes` with it switched on gives the same fields, leaves the same bytes held, and the
packets pulled after it (or the refusal) are the same as with it switched off."""

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.asan import run_under_asan, sanitized
from tidings.core.mqtt import codec
from tidings.core.mqtt import packets as p
from tidings.core.mqtt.codec import PacketDecoder
from tidings.core.mqtt.encode import encode
from tidings.core.mqtt.fields import vbi

ASAN_BUILD = sanitized("TIDINGS_TEST_PUBLISHES_ASAN", "_publishes")  # _publishes.c with ASan (the soak test)
if ASAN_BUILD is not None:
    codec._publishes = ASAN_BUILD
    codec.use_native(True)
COMPILED = codec._publishes is not None
EXAMPLES = 300  # in make test; make soak runs the long form
SOAK_EXAMPLES = 5000
SLOW_OK = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

GOOD_TOPICS = [b"a/b", b"nodes/h1/load", b"\xc3\xa9t\xc3\xa9", "\U0001f600/x".encode(), b"/", b"$SYS/x"]
BAD_TOPICS = [b"a/+", b"#", b"", b"a\x00b", b"\xed\xa0\x80", b"\xc0\xaf", b"\xff", b"+", b"a\xc3"]
TOPIC_CHARS = st.characters(blacklist_characters="\x00+#", blacklist_categories=("Cs",))  # (UTF-8 encodable)
FAULTS = ["flags", "topic", "topic length", "packet id", "properties", "remaining length", "truncated"]


@st.composite
def publish(draw, version: int):
    """A PUBLISH laid out by hand, well formed and plain, or with one thing wrong or unusual: its
    flags, topic, topic length, packet identifier, properties, or remaining length (not in its
    shortest form, or longer than four bytes), or cut short."""
    fault = draw(st.one_of(st.none(), st.none(), st.sampled_from(FAULTS)))
    qos = draw(st.integers(0, 2))
    flags = qos << 1 | draw(st.integers(0, 1)) | (draw(st.booleans()) << 3 if qos else 0)
    if fault == "flags":
        flags = draw(st.integers(0, 15))
    topic = draw(st.one_of(st.sampled_from(GOOD_TOPICS), st.text(TOPIC_CHARS, min_size=1, max_size=12).map(str.encode)))
    if fault == "topic":
        topic = draw(st.one_of(st.sampled_from(BAD_TOPICS), st.binary(max_size=8)))
    topic_len = draw(st.integers(0, 0xFFFF)) if fault == "topic length" else len(topic)
    pid = draw(st.binary(min_size=2, max_size=2).filter(any)) if qos else b""
    if fault == "packet id":
        pid = draw(st.sampled_from([b"", b"\x00\x00", b"\x12"]))
    props = b"\x00" if version == 5 else b""
    if fault == "properties":
        props = draw(st.sampled_from([b"", b"\x02\x01\x01", b"\x03\x23\x00\x05", b"\x05\x01", b"\x80\x00", b"\x01"]))
    body = topic_len.to_bytes(2, "big") + topic + pid + props + draw(st.binary(max_size=40))
    length = vbi(len(body))
    if fault == "remaining length":
        length = bytes(b | 0x80 for b in length) + b"\x00" * draw(st.integers(0, 4))
    packet = bytes((0x30 | flags,)) + length + body
    return packet[:draw(st.integers(0, len(packet) - 1))] if fault == "truncated" else packet


PACKETS = [encode(p.Puback(7), 5), b"\xc0\x00", encode(p.Subscribe(3, (p.TopicFilter("a/#", 1),)), 5),
           encode(p.Publish("a/b", b"x" * 200, 1, packet_id=9), 5), encode(p.Publish("a/b", b"y", 0), 4),
           encode(p.Publish("t", b"z", 1, properties=p.Properties(content_type="text/plain"), packet_id=3), 5)]


@st.composite
def streams(draw):
    version = draw(st.sampled_from([4, 5]))
    items = draw(st.lists(st.one_of(publish(version), publish(version), publish(version),
                                    st.sampled_from(PACKETS), st.binary(max_size=6)), max_size=8))
    data = b"".join(items)
    cut = draw(st.integers(0, len(data)))
    return data, cut, draw(st.sampled_from([2, 8, 30, 100, 1 << 20])), version


def read(data: bytes, cut: int, packet_bytes_max: int, version: int, native: bool) -> list[object]:
    """What a decoder says of `data` arriving in two parts: each part's run, what is held, then the
    packets pulled and the refusal."""
    saved = codec.native()
    codec.use_native(native)
    try:
        decoder = PacketDecoder(packet_bytes_max, version)
        said: list[object] = []
        for part in (data[:cut], data[cut:]):
            decoder.push(part)
            said += [decoder.take_publishes(), decoder.held_bytes, decoder.take_pubacks(), decoder.held_bytes]
        said += [decoder.take(), decoder.held_bytes, repr(decoder.failure)]
        return said
    finally:
        codec.use_native(saved)


def compared(data: bytes, cut: int, packet_bytes_max: int, version: int) -> None:
    assert read(data, cut, packet_bytes_max, version, True) == read(data, cut, packet_bytes_max, version, False)


PLAIN = encode(p.Publish("nodes/h1/load", b"x" * 100, 0), 5)


@pytest.mark.skipif(not COMPILED, reason="the compiled read is not built here")
@settings(SLOW_OK, max_examples=EXAMPLES)
@given(streams())
@example((PLAIN * 3, 0, 1 << 20, 5)).via("a run of plain ones")
@example((PLAIN * 3, len(PLAIN) + 7, 1 << 20, 5)).via("a run cut inside the second")
@example((PLAIN + PACKETS[5] + PLAIN, 0, 1 << 20, 5)).via("one with properties between plain ones")
@example((PLAIN + b"\x30\x80\x00", 0, 1 << 20, 5)).via("a remaining length not in its shortest form")
@example((PLAIN, 0, len(PLAIN) - 1, 5)).via("one over the Maximum Packet Size")
@example((encode(p.Publish("a/b", b"q", 2, packet_id=5), 4) * 2, 0, 1 << 20, 4)).via("QoS 2 in 3.1.1")
def test_the_compiled_read_takes_what_the_python_reader_takes(stream):
    compared(*stream)


@pytest.mark.soak
@pytest.mark.skipif(not COMPILED, reason="the compiled read is not built here")
@settings(SLOW_OK, max_examples=SOAK_EXAMPLES)
@given(streams())
def test_the_compiled_read_takes_what_the_python_reader_takes_long(stream):
    compared(*stream)


@pytest.mark.skipif(not COMPILED, reason="the compiled read is not built here")
def test_the_compiled_read_takes_the_plain_ones_itself():
    """It is not a no-op: a run of plain PUBLISHes is read in C to its end, and stops before a
    PUBLISH with properties (the Python reader's); its fields are `publish_fields`'."""
    assert codec._publishes is not None
    buf = bytearray(PLAIN * 2 + PACKETS[5] + PLAIN)
    fields, pos = codec._publishes.take(buf, 0, 1 << 20, 5, p.NO_PROPERTIES)
    assert pos == 2 * len(PLAIN)
    assert fields == [("nodes/h1/load", b"x" * 100, 0, False, False, None, p.NO_PROPERTIES)] * 2
    assert codec._publishes.take(buf, pos, 1 << 20, 5, p.NO_PROPERTIES) == ([], pos)
    with pytest.raises(ValueError, match="outside"):
        codec._publishes.take(buf, len(buf) + 1, 1 << 20, 5, p.NO_PROPERTIES)


def test_the_compiled_read_is_off_when_switched_off():
    saved = codec.native()
    try:
        codec.use_native(False)
        assert not codec.native()
        codec.use_native(True)
        assert codec.native() is COMPILED
    finally:
        codec.use_native(saved)


@pytest.mark.soak
def test_the_compiled_read_under_address_sanitizer(tmp_path: Path) -> None:
    """_publishes.c built with AddressSanitizer and UBSan, the long comparison run against it in a
    child Python (libasan preloaded; CPython's own allocations are not leak-checked)."""
    run_under_asan(tmp_path, os.path.join(os.path.dirname(codec.__file__), "_publishes.c"),
                   "TIDINGS_TEST_PUBLISHES_ASAN",
                   f"{__file__}::test_the_compiled_read_takes_what_the_python_reader_takes_long")
