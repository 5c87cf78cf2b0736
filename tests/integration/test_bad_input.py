"""Garbage on the wire: an error to the sender, a closed connection, a broker that serves on.

The fuzz sends any bytes, on the client path (before or after HELLO) and on the peer path (after a
PEER_HELLO), without closing its end: each connection gets its answer (its bytes framed whole, then a
probe answered in order) or is closed within the deadlines (a partial frame by
frame_progress_timeout_ns, a partial HELLO by handshake_timeout_ns), the broker's resident memory
stays within ATTACK_RSS_BYTES_MAX of where it started, and the subscriber beside it gets every event
published meanwhile. `make soak` runs it longer (the tests marked soak).
"""

import random
import socket
import struct
import time

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings import sync
from tidings.core.overlay.node_id import NodeRef
from tidings.core.wire import decoders, messages, peer
from tidings.core.wire.frames import FrameDecoder, frame
from tidings.core.wire.types import LinkType
from tidings.testing import BrokerProcess

from .test_memory_bounds import ATTACK_RSS_BYTES_MAX, vm
from .wire_io import converse, exchange

pytestmark = pytest.mark.integration
DEADLINE_NS = 300_000_000  # the fuzz broker's handshake and frame progress deadlines
ANSWER_S = 3.0  # a connection neither answered nor closed by then hangs
FUZZ_EXAMPLES = 60  # each path: about 10 s for both in make test
SOAK_FUZZ_EXAMPLES = 3000  # each path under make soak: about 10 min for both
PROBE_REQ = 4242

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
    cfg = {"frame_bytes_max": 65536, "event_bytes_max": 4096, "handshake_timeout_ns": DEADLINE_NS,
           "frame_progress_timeout_ns": DEADLINE_NS}
    with BrokerProcess(tmp_path_factory.mktemp("fuzz") / "b", cfg) as broker:
        with sync.connect(broker.address) as sub_client, sync.connect(broker.address) as pub_client:
            sub = sub_client.subscribe("steady/#")
            state = {"published": [], "rss": vm(broker.pid, "VmRSS")}
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
        msg = decoders.decode_broker_message(body)  # whatever the broker says is well-formed
        # a mutation can make a valid request: a bounded SUBSCRIBE is rightly answered with END
        assert isinstance(msg, messages.Welcome | messages.Error | messages.Ack | messages.Subscribed
                          | messages.StatusReply | messages.Events | messages.End | messages.Gap)
    res = pub_client.publish("steady/x", b"still here")
    state["published"].append(res.tick)


def test_oversized_frame_gets_an_error_then_close(fuzz_broker):
    broker = fuzz_broker[0]
    reply = exchange(broker.address, greeted(struct.pack(">I", 70000) + b"x" * 100, hello=True))
    msgs = [decoders.decode_broker_message(b) for b in FrameDecoder(1 << 20).feed(reply)]
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
        assert decoders.decode_broker_message(body).code == "handshake-timeout"
        assert 0.2 < waited < 5


# any bytes, and frames left partial (a length within the limits, fewer bytes than it says)
hostile = st.one_of(garbage, st.builds(lambda n, k: struct.pack(">I", n) + b"x" * min(k, max(n - 1, 0)),
                                       st.integers(1, 70_000), st.integers(0, 3000)))


def framed_whole(data: bytes) -> bool:
    decoder = FrameDecoder(65536)
    decoder.feed(data)
    return decoder.failure is None and decoder.held_bytes == 0


def served_on(broker, state) -> None:
    """The broker kept its memory, and serves the publisher beside the fuzz."""
    assert vm(broker.pid, "VmRSS") - state["rss"] <= ATTACK_RSS_BYTES_MAX
    state["published"].append(broker_publish(state))


def broker_publish(state) -> int:
    return state["pub"].publish("steady/x", b"still here").tick


def probe_answered(bodies: list[bytes]) -> bool:
    for body in bodies:
        msg = decoders.decode_broker_message(body)
        if isinstance(msg, messages.StatusReply) and msg.req == PROBE_REQ:
            return True
    return False


def client_case(fuzz_broker, data: bytes, hello: bool) -> None:
    """The client decoder: the connection is not closed on our side, so only the broker's own
    rules (an ERROR and a close, the deadlines) end it; when the bytes are whole frames a STATUS
    probe behind them is answered, in order, or the connection is closed."""
    broker, _, pub_client, state = fuzz_broker
    sent = greeted(data, hello)
    whole = framed_whole(sent)
    bodies, closed = converse(broker.address, sent + (messages.status_request(PROBE_REQ) if whole else b""),
                              probe_answered, ANSWER_S)
    msgs = [decoders.decode_broker_message(b) for b in bodies]  # whatever the broker says is well-formed
    assert closed or whole, "a connection holding a partial frame was answered but not closed"
    if closed and msgs and not whole:
        assert isinstance(msgs[-1], messages.Error), "closed with a reason"
    state["pub"] = pub_client
    served_on(broker, state)


def peer_case(fuzz_broker, data: bytes, node: int) -> None:
    """The peer decoder, behind a PEER_HELLO: whole frames are followed by a PING, which gets its
    PONG unless the link was refused (PEER_ERROR, close); a partial frame is closed in time."""
    broker, _, pub_client, state = fuzz_broker
    whole = framed_whole(data)
    seq = random.randrange(1 << 30)

    def ponged(bodies: list[bytes]) -> bool:
        return any(peer.unpack(b)[:2] == [LinkType.PONG, seq] for b in bodies)

    hello = peer.hello(NodeRef(node, "127.0.0.1:1"))
    bodies, closed = converse(broker.address, hello + data + (peer.ping(seq) if whole else b""), ponged, ANSWER_S)
    assert closed or whole, "a peer connection holding a partial frame was answered but not closed"
    kinds = [peer.unpack(b)[0] for b in bodies]
    assert not kinds or kinds[0] in (LinkType.PEER_WELCOME, LinkType.PEER_ERROR)
    if closed and len(kinds) > 1 and not whole:
        assert kinds[-1] == LinkType.PEER_ERROR, "closed with a reason"
    state["pub"] = pub_client
    served_on(broker, state)


FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
clients = given(data=hostile, hello=st.booleans())
peers = given(data=hostile, node=st.integers(1, (1 << 128) - 1))


@settings(FUZZ, max_examples=FUZZ_EXAMPLES)
@clients
def test_any_bytes_from_a_client_get_an_answer_or_a_close_in_time(fuzz_broker, data, hello):
    client_case(fuzz_broker, data, hello)


@settings(FUZZ, max_examples=FUZZ_EXAMPLES)
@peers
def test_any_bytes_from_a_peer_get_an_answer_or_a_close_in_time(fuzz_broker, data, node):
    peer_case(fuzz_broker, data, node)


@pytest.mark.soak
@settings(FUZZ, max_examples=SOAK_FUZZ_EXAMPLES)
@clients
def test_any_bytes_from_a_client_for_long(fuzz_broker, data, hello):
    client_case(fuzz_broker, data, hello)


@pytest.mark.soak
@settings(FUZZ, max_examples=SOAK_FUZZ_EXAMPLES)
@peers
def test_any_bytes_from_a_peer_for_long(fuzz_broker, data, node):
    peer_case(fuzz_broker, data, node)
