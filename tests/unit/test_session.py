import datetime as dt

import pytest

from tidings.core.errors import ChannelError, FilterError, TidingsError
from tidings.core.event import datetime_to_tick
from tidings.core.session.client_session import ClientSession, start_spec
from tidings.core.wire import decoders, messages
from tidings.core.wire.frames import FrameDecoder


def test_start_specs():
    assert start_spec("now") == ("now", 0)
    assert start_spec("start") == ("start", 0)
    assert start_spec(42) == ("after", 42)
    when = dt.datetime(2026, 11, 22, 10, 0, tzinfo=dt.UTC)
    assert start_spec(when) == ("after", datetime_to_tick(when) - 1)
    for bad in (-1, True, "yesterday", 1.5):
        with pytest.raises(TidingsError):
            start_spec(bad)


def test_bad_requests_fail_before_sending():
    s = ClientSession("svc", "i")
    with pytest.raises(ChannelError):
        s.check_event("a/+", b"", None)
    with pytest.raises(TidingsError, match="event_bytes_max"):
        s.check_event("a", b"x" * (s.event_bytes_max + 1), None)
    with pytest.raises(TidingsError, match="attribute"):
        s.check_event("a", b"", {"k": [1]})
    with pytest.raises(ChannelError):
        s.subscribe("a/#/b")
    with pytest.raises(FilterError):
        s.subscribe("a", "x >")


def test_large_batches_split_into_frames_with_consecutive_seqs():
    s = ClientSession("svc", "i")
    s.frame_bytes_max = 64 * 1024
    events = [s.check_event("a/b", b"x" * 1000, {"n": i}) for i in range(200)]
    frames = s.publish(events)
    assert len(frames) > 1
    seq = 0
    dec = FrameDecoder(1 << 20)
    for first, count, wire in frames:
        assert first == seq and len(wire) <= s.frame_bytes_max
        msg = decoders.decode_client_message(dec.feed(wire)[0])
        assert msg.seq == first and len(msg.events) == count
        seq += count
    assert seq == 200


def test_welcome_sets_broker_limits():
    s = ClientSession("svc", "i")
    s.receive(messages.welcome({"pubend": "p1", "frame_bytes_max": 1000, "event_bytes_max": 10}))
    assert (s.pubend, s.frame_bytes_max, s.event_bytes_max) == ("p1", 1000, 10)


def test_acks_passed_over_undecoded_only_when_asked():
    """`receive(acks=False)` (an MQTT QoS 0 publisher's session) drops ACK frames, with or without
    duplicates, and nothing else: the frames around them come in order, and a split frame is whole."""
    s = ClientSession("svc", "i")
    frames = (messages.ack(1, "p1", [7]) + messages.subscribed(3, 0) + messages.ack(2, "p1", [8, None], [1])
              + messages.error("bad-message", "no"))
    kinds = [type(m).__name__ for m in s.receive(frames[:5]) + s.receive(frames[5:], acks=False)]
    assert kinds == ["Subscribed", "Error"]
    kept = ClientSession("svc", "i").receive(frames)
    assert [type(m).__name__ for m in kept] == ["Ack", "Subscribed", "Ack", "Error"]
    assert [(m.seq, m.ticks, m.duplicates) for m in kept if isinstance(m, messages.Ack)] == [(1, [7], []),
                                                                                              (2, [8, None], [1])]
