"""The cluster credential on the peer links: brokers holding the secret link up as before (also
under the tie-break and fuzz schedules of test_peers.py), and a process without it, or with
another, never gets a link, and nothing it sends reaches the layers above."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.auth.peer_auth import ClusterAuth
from tidings.core.effects import Disconnect, PeerRefused
from tidings.core.links.link import OPEN
from tidings.core.links.peer_links import PeerLinks
from tidings.core.links.refusals import valid_address
from tidings.core.wire import peer
from tidings.core.wire.frames import FrameDecoder
from tidings.core.wire.types import LinkType

from .test_peers import ACTIONS, CFG, LARGE, MID, SMALL, Net, check_simultaneous_dials, msg, play, split

SECRET = b"k" * 32
COUNTER = itertools.count()


def nonce(n):
    return next(COUNTER).to_bytes(n, "big")


def secured(*refs, secrets, seed=None):
    net = Net(*refs, seed=seed)
    for ref, secret in zip(refs, secrets, strict=True):
        net.nodes[ref.address] = PeerLinks(ref, CFG, None if secret is None else ClusterAuth(secret, nonce))
    return net


def test_brokers_with_the_secret_link_up_both_ways():
    net = secured(SMALL, LARGE, secrets=[SECRET, SECRET])
    net.send(SMALL.address, LARGE.address, msg(1))
    net.run()
    net.send(LARGE.address, SMALL.address, msg(2))
    net.run()
    assert net.got[LARGE.address] == [(SMALL.address, msg(1))]
    assert net.got[SMALL.address] == [(LARGE.address, msg(2))]
    assert net.links(SMALL.address)[LARGE.address]["state"] == OPEN


@pytest.mark.parametrize(("dialler", "acceptor"), [(None, SECRET), (b"o" * 32, SECRET), (SECRET, b"o" * 32),
                                                   (SECRET, None)])
def test_without_the_same_secret_there_is_no_link(dialler, acceptor):
    net = secured(SMALL, LARGE, secrets=[dialler, acceptor])
    net.send(SMALL.address, LARGE.address, msg(1))
    net.run()
    assert net.got == {SMALL.address: [], LARGE.address: []}
    assert net.unreachable[SMALL.address] == [LARGE.address]
    assert net.links(LARGE.address) == {} or net.links(LARGE.address)[SMALL.address]["state"] != OPEN


@pytest.mark.parametrize(("dialler", "acceptor", "reasons", "says"), [
    (None, SECRET, ("missing-credential", "missing-credential"), f"{LARGE.address} requires a cluster credential"),
    (SECRET, None, ("unexpected-credential", "unexpected-credential"), f"{LARGE.address} has no cluster credential"),
    (b"o" * 32, SECRET, ("bad-proof", "bad-proof"), f"{LARGE.address} holds another cluster credential"),
])
def test_a_refused_link_is_counted_and_named_at_both_ends(dialler, acceptor, reasons, says):
    """Both ends count the refusal by reason and hand the runtime a PeerRefused to log; the
    dialler's says in its own words what is wrong, which is what a failed join reports."""
    net = secured(SMALL, LARGE, secrets=[dialler, acceptor])
    net.send(SMALL.address, LARGE.address, msg(1))
    net.run()
    ends = {side: [e for e in net.effects[ref.address] if isinstance(e, PeerRefused)]
            for side, ref in (("dialler", SMALL), ("acceptor", LARGE))}
    assert [(e.side, e.reason) for e in ends["dialler"]] == [("dialler", reasons[0])]
    assert ends["dialler"][0].address == LARGE.address and ends["dialler"][0].detail.startswith(says)
    assert [(e.side, e.reason, e.address) for e in ends["acceptor"]] == [("acceptor", reasons[1], SMALL.address)]
    assert net.nodes[SMALL.address].refusals_status() == {"acceptor": {}, "dialler": {reasons[0]: 1}}
    assert net.nodes[LARGE.address].refusals_status() == {"acceptor": {reasons[1]: 1}, "dialler": {}}
    assert net.nodes[SMALL.address].last_failure == f"{LARGE.address}: {ends['dialler'][0].detail}"


def test_a_wrong_peer_auth_is_a_bad_proof_and_the_dialler_hears_its_credential_was_refused():
    links = PeerLinks(LARGE, CFG, ClusterAuth(SECRET, nonce))
    _, effects = adopt(links, peer.hello(SMALL, nonce=b"n" * 24) + peer.auth(b"\x00" * 32))
    assert peer_errors(effects) == ["auth-failed"]
    assert [(e.side, e.reason) for e in effects if isinstance(e, PeerRefused)] == [("acceptor", "bad-proof")]
    # the dialler's side of the same: it answered the challenge, then the acceptor refused its proof
    dialler = PeerLinks(SMALL, CFG, ClusterAuth(SECRET, nonce))
    net = Net(SMALL, LARGE)
    net.nodes[SMALL.address] = dialler
    net.nodes[LARGE.address] = PeerLinks(LARGE, CFG, ClusterAuth(SECRET, lambda n: b"\x01" * n))
    real_valid = ClusterAuth.valid
    net.nodes[LARGE.address].cluster.valid = lambda proof, role, *rest: role != b"dialler" and real_valid(
        net.nodes[LARGE.address].cluster, proof, role, *rest)
    net.send(SMALL.address, LARGE.address, msg(1))
    net.run()
    refused = [e for e in net.effects[SMALL.address] if isinstance(e, PeerRefused)]
    assert [(e.reason, e.detail) for e in refused] == [("bad-proof", f"cluster credential refused by {LARGE.address}")]


@pytest.mark.parametrize("address", ["not an address", "host", "host:", ":7400", "host:0", "host:65536", "h st:1",
                                     "host:\uff11\uff12", "host:-1"])
def test_an_announced_address_that_is_not_host_port_is_refused(address):
    from tidings.core.overlay.node_id import NodeRef

    assert not valid_address(address)
    links = PeerLinks(LARGE, CFG)
    _, effects = adopt(links, peer.hello(NodeRef(SMALL.node_id, address)))
    assert peer_errors(effects) == ["handshake"] and isinstance(effects[-1], Disconnect)
    assert [(e.side, e.reason) for e in effects if isinstance(e, PeerRefused)] == [("acceptor", "bad-address")]
    assert links.status() == [] and links.refusals_status()["acceptor"] == {"bad-address": 1}


@pytest.mark.parametrize("address", ["127.0.0.1:7400", "broker-1.example.org:1", "[::1]:65535", "b0:7000"])
def test_host_port_addresses_are_valid(address):
    assert valid_address(address)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32), first=st.sampled_from([SMALL, LARGE]), count=st.integers(1, 3))
def test_simultaneous_dials_with_the_credential_keep_one_connection(seed, first, count):
    check_simultaneous_dials(secured(SMALL, LARGE, secrets=[SECRET, SECRET], seed=seed), first, count)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32), actions=ACTIONS)
def test_any_schedule_with_the_credential_settles_on_one_link_per_pair(seed, actions):
    refs = [SMALL, MID, LARGE]
    net = secured(*refs, secrets=[SECRET] * 3, seed=seed)
    for kind, a, b in actions:
        play(net, refs, kind, a, b)
    net.run()
    for src in refs:
        for dst in refs:
            if src is not dst:
                net.send(src.address, dst.address, [101, src.address])
    net.run()
    for a, b in ((SMALL, MID), (SMALL, LARGE), (MID, LARGE)):
        assert net.links(a.address)[b.address]["state"] == OPEN


def adopt(links, data):
    bodies = FrameDecoder(1 << 20).feed(data)
    return split(links.adopt(0, 9, FrameDecoder(CFG.frame_bytes_max), bodies[0], bodies[1:]))


def peer_errors(effects):
    return [peer.unpack(b)[1] for e in effects if hasattr(e, "data")
            for b in FrameDecoder(1 << 20).feed(e.data) if peer.unpack(b)[0] == LinkType.PEER_ERROR]


def test_an_unproven_connection_is_never_acted_on_and_times_out():
    links = PeerLinks(LARGE, CFG, ClusterAuth(SECRET, nonce))
    tree_messages = b"".join(peer.encode(m) for m in ([64, "join"], [96, "heartbeat"], [140, "x"]))
    items, effects = adopt(links, peer.hello(SMALL, nonce=b"n" * 24) + tree_messages)
    assert items == [] and peer_errors(effects) == ["handshake"]  # the first non-PEER_AUTH closes it
    assert links.status() == []
    items, effects = adopt(links, peer.hello(SMALL, nonce=b"n" * 24))  # a challenge, then silence
    assert items == [] and peer.unpack(FrameDecoder(1 << 20).feed(effects[0].data)[0])[0] == LinkType.PEER_CHALLENGE
    deadline = links.next_deadline()
    assert deadline == CFG.handshake_timeout_ns
    items, effects = split(links.handle_timeout(deadline))
    assert peer_errors(effects) == ["handshake-timeout"] and isinstance(effects[-1], Disconnect)
    assert links.next_deadline() is None


def test_a_replayed_peer_auth_fails():
    """Record a good dialler's PEER_HELLO and PEER_AUTH; played again they meet a new nonce."""
    net = secured(SMALL, LARGE, secrets=[SECRET, SECRET])
    net.send(SMALL.address, LARGE.address, msg(1))
    net.run()
    sent = [e.data for e in net.effects[SMALL.address] if hasattr(e, "data")]
    auth_type = LinkType.PEER_AUTH
    hello, auth = sent[0], next(d for d in sent if peer.unpack(FrameDecoder(1 << 20).feed(d)[0])[0] == auth_type)
    victim = PeerLinks(LARGE, CFG, ClusterAuth(SECRET, nonce))
    items, effects = adopt(victim, hello + auth)
    assert items == [] and peer_errors(effects) == ["auth-failed"]
    assert victim.status() == []
