"""Garbage on the wire: an error to the sender, a closed connection, a broker that serves on."""

import socket
import struct
import time

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings import sync
from tidings.core.wire import messages
from tidings.core.wire.frames import FrameDecoder, frame
from tidings.testing import BrokerProcess

from .wire_io import exchange

pytestmark = pytest.mark.integration

VALID = [
    messages.publish(0, [["a/b", {"k": 1}, b"x"]]),
    messages.subscribe(messages.Subscribe(1, "a/#", "k > 0", "now", 0, None)),
    messages.status_request(1),
    messages.unsubscribe(1),
]


def greeted(data: bytes, hello: bool) -> bytes:
    return messages.hello("fuzz", "1") + data if hello else data


def mutate(data: bytes, flips: list[tuple[int, int]]) -> bytes:
    buf = bytearray(data)
    for pos, val in flips:
        if buf:
            buf[pos % len(buf)] = val
    return bytes(buf)


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory):
    cfg = {"frame_bytes_max": 65536, "event_bytes_max": 4096}
    with BrokerProcess(tmp_path_factory.mktemp("fuzz") / "b", cfg) as broker:
        with sync.connect(broker.address) as sub_client, sync.connect(broker.address) as pub_client:
            sub = sub_client.subscribe("steady/#")
            state = {"published": []}
            yield broker, sub, pub_client, state
            got = []
            while len(got) < len(state["published"]):
                got.append(sub.get(10).tick)
            assert got == state["published"], "the well-behaved subscriber kept its full stream"
        assert broker.proc.poll() is None, "the broker survived"


garbage = st.one_of(
    st.binary(max_size=2000),
    st.builds(frame, st.binary(max_size=500)),
    st.builds(lambda body: frame(msgpack.packb(body)),
              st.recursive(
                  st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=20)
                  | st.binary(max_size=20),
                  lambda c: st.lists(c, max_size=6) | st.dictionaries(st.text(max_size=5), c, max_size=4),
                  max_leaves=20)),
    st.builds(mutate, st.sampled_from(VALID), st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)),
                                                       min_size=1, max_size=4)),
    st.just(struct.pack(">I", 1 << 30) + b"xx"),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=garbage, hello=st.booleans())
def test_random_and_mutated_frames(fuzz_broker, data, hello):
    broker, _, pub_client, state = fuzz_broker
    reply = exchange(broker.address, greeted(data, hello))
    bodies = FrameDecoder(1 << 20).feed(reply)
    for body in bodies:
        msg = messages.decode_broker_message(body)  # whatever the broker says is well-formed
        # a mutation can make a valid request: a bounded SUBSCRIBE is rightly answered with END
        assert isinstance(msg, messages.Welcome | messages.Error | messages.Ack | messages.Subscribed
                          | messages.StatusReply | messages.Events | messages.End | messages.Gap)
    res = pub_client.publish("steady/x", b"still here")
    state["published"].append(res.tick)


def test_oversized_frame_gets_an_error_then_close(fuzz_broker):
    broker = fuzz_broker[0]
    reply = exchange(broker.address, greeted(struct.pack(">I", 70000) + b"x" * 100, hello=True))
    msgs = [messages.decode_broker_message(b) for b in FrameDecoder(1 << 20).feed(reply)]
    assert isinstance(msgs[0], messages.Welcome)
    assert msgs[1].code == "frame-too-large" and "frame_bytes_max" in msgs[1].message


def test_silent_client_is_dropped_after_the_handshake_timeout(tmp_path):
    with BrokerProcess(tmp_path / "b", {"handshake_timeout_ns": 300_000_000}) as broker:
        host, port = broker.address.split(":")
        with socket.create_connection((host, int(port)), timeout=10) as s:
            start = time.monotonic()
            data = b""
            while chunk := s.recv(4096):
                data += chunk
            waited = time.monotonic() - start
        (body,) = FrameDecoder(1 << 20).feed(data)
        assert messages.decode_broker_message(body).code == "handshake-timeout"
        assert 0.2 < waited < 5
