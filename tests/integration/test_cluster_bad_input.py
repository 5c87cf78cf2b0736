"""Garbage on the broker-to-broker path: an error to the sender, a closed connection, and brokers
that go on serving their clients and each other."""

import itertools
import struct

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings import sync
from tidings.core.overlay.node_id import NodeRef
from tidings.core.wire import decoders, messages, peer
from tidings.core.wire.frames import FrameDecoder, frame
from tidings.core.wire.types import ClientType, LinkType
from tidings.testing import Cluster

from .wire_io import exchange

pytestmark = pytest.mark.integration

FAKE_IDS = itertools.count(1)


def fake_node() -> NodeRef:
    """A broker that does not exist: its address refuses connections (port 9 on loopback)."""
    n = next(FAKE_IDS)
    return NodeRef((n << 64) | 0x5EED, f"127.0.0.{1 + n % 200}:9")


def replies(address: str, data: bytes) -> list[bytes]:
    """The frame bodies the broker sent back before it closed the connection."""
    return FrameDecoder(1 << 20).feed(exchange(address, data, timeout=10.0))


def link_messages(bodies: list[bytes]) -> list[peer.PeerLinkMessage]:
    return [peer.decode_link_message(peer.unpack(b)) for b in bodies]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    cfg = {"frame_bytes_max": 65536, "event_bytes_max": 4096}
    with Cluster(tmp_path_factory.mktemp("peers"), 2, cfg) as cluster:
        with sync.connect(cluster[1].address) as sub_client, sync.connect(cluster[0].address) as pub_client:
            sub = sub_client.subscribe("steady/#")
            wait_in_tree(cluster, cluster[1], "steady/#")
            state = {"published": []}
            yield cluster, sub, pub_client, state
            got = []
            while len(got) < len(state["published"]):
                got.append(sub.get(10).tick)
            assert got == state["published"], "the subscriber across the overlay kept its full stream"
        for b in cluster.brokers:
            assert b.running, "every broker survived"


def wait_in_tree(cluster, broker, tree):
    def member():
        status = cluster.status(broker) or {}
        return any(t["name"] == tree and t["member"] and (t["parent"] or "root" in t["role"])
                   for t in status.get("trees", []))
    cluster.wait(member, 30, what=f"{broker.address} in tree {tree}")


def still_serving(pair):
    """A publish at one broker still reaches the subscriber at the other, and their link is open."""
    cluster, _, pub_client, state = pair
    state["published"].append(pub_client.publish("steady/x", b"still here").tick)
    links = {p["address"]: p["state"] for p in cluster.status(cluster[0])["peers"]}
    assert links.get(cluster[1].address) == "open"


def test_hello_then_garbage_gets_a_peer_error_and_a_close(pair):
    cluster = pair[0]
    bodies = replies(cluster[0].address, peer.hello(fake_node()) + b"\x00\x00\x00\x04\xc1\xc1\xc1\xc1")
    msgs = link_messages(bodies)
    assert isinstance(msgs[0], peer.PeerWelcome) and msgs[0].node.address == cluster[0].address
    assert isinstance(msgs[-1], peer.PeerError) and msgs[-1].code == "bad-message"
    still_serving(pair)


@pytest.mark.parametrize(("after_hello", "code"), [
    (struct.pack(">I", 1 << 30) + b"xx", "frame-too-large"),
    (frame(msgpack.packb([LinkType.PING])), "bad-message"),
    (frame(msgpack.packb([200, 1])), "unknown-message"),
    (frame(msgpack.packb([ClientType.PUBLISH, 1, []])), "unknown-message"),  # a client message
    (peer.hello(NodeRef(7, "127.0.0.1:9")), "handshake"),  # a second HELLO
])
def test_malformed_frames_after_the_hello(pair, after_hello, code):
    cluster = pair[0]
    msgs = link_messages(replies(cluster[0].address, peer.hello(fake_node()) + after_hello))
    assert isinstance(msgs[0], peer.PeerWelcome)
    assert isinstance(msgs[-1], peer.PeerError) and msgs[-1].code == code
    still_serving(pair)


def test_a_malformed_overlay_message_is_refused_by_its_layer(pair):
    cluster = pair[0]
    msgs = link_messages(replies(cluster[1].address, peer.hello(fake_node()) + peer.encode([64, "junk"])))
    assert isinstance(msgs[-1], peer.PeerError)
    assert cluster.status(cluster[1])["peer_messages_rejected"] >= 1
    still_serving(pair)


@pytest.mark.parametrize("hello", [
    msgpack.packb([LinkType.PEER_HELLO]),
    msgpack.packb([LinkType.PEER_HELLO, 1, "junk"]),
    msgpack.packb([LinkType.PEER_HELLO, 1, [b"short", "127.0.0.1:9"]]),
    msgpack.packb([LinkType.PEER_HELLO, 1, [b"\x01" * 16, ""]]),
    msgpack.packb([LinkType.PEER_HELLO, 1, [b"\x01" * 16, "x" * 1000]]),
])
def test_a_malformed_peer_hello_gets_a_client_error_and_a_close(pair, hello):
    cluster = pair[0]
    (body,) = replies(cluster[0].address, frame(hello) + peer.ping(1))
    err = decoders.decode_broker_message(body)
    assert isinstance(err, messages.Error) and err.code == "handshake" and "PEER_HELLO" in err.message
    still_serving(pair)


def test_a_hello_in_another_protocol_version(pair):
    cluster = pair[0]
    msgs = link_messages(replies(cluster[0].address, peer.hello(fake_node(), version=99)))
    assert msgs == [peer.PeerError("version-mismatch", msgs[0].message)]
    assert "version 99" in msgs[0].message
    still_serving(pair)


garbage = st.one_of(
    st.binary(max_size=500),
    st.builds(frame, st.binary(max_size=200)),
    st.builds(lambda body: frame(msgpack.packb(body)),
              st.lists(st.integers(0, 300) | st.binary(max_size=20) | st.text(max_size=10) | st.none(),
                       min_size=1, max_size=5)),
)


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=garbage)
def test_random_bytes_after_the_hello(pair, data):
    cluster = pair[0]
    for msg in link_messages(replies(cluster[0].address, peer.hello(fake_node()) + data)):
        assert isinstance(msg, peer.PeerWelcome | peer.Ping | peer.Pong | peer.PeerError)
    assert cluster[0].running


@pytest.mark.parametrize("address", ["not an address", "127.0.0.1", "127.0.0.1:0", "host:99999", "a b:1"])
def test_a_hello_announcing_what_is_not_host_port_is_refused_with_the_reason(pair, address):
    """A broker without a cluster credential still takes no address but HOST:PORT into its tables."""
    cluster = pair[0]
    before = cluster.status(cluster[0])
    counted = before["peer_refusals"]["acceptor"].get("bad-address", 0)
    hello = peer.hello(NodeRef(fake_node().node_id, address))
    msgs = link_messages(replies(cluster[0].address, hello + peer.encode([64, "join"])))
    assert msgs == [peer.PeerError("handshake", f"PEER_HELLO announces {address!r}, not HOST:PORT")]
    status = cluster.status(cluster[0])
    assert status["peer_refusals"]["acceptor"]["bad-address"] == counted + 1
    assert address not in {p["address"] for p in status["peers"]}
    assert status["peer_messages_rejected"] == before["peer_messages_rejected"]  # it reached no layer
    still_serving(pair)
