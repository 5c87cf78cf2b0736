"""PeerLinks: handshakes both ways, queues, tie-breaks, bad input, RTT, loss; and the peer codec.

`Net` is a small in-memory network of PeerLinks: it carries Sends between connection ends in order
(per connection), answers Connect with Connected or ConnectFailed, reports ConnectionLost to both
ends of a closed connection, and plays the broker's part of handing an accepted connection whose
first frame is a PEER_HELLO to `adopt`. With a seed it interleaves connections in random orders,
which the tie-break and fuzz tests use to try many orders in which dials, handshakes and drops can
meet.
"""

import contextlib
import random
from collections import deque
from dataclasses import replace

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core import errors
from tidings.core.effects import Connect, Disconnect, Send, coalesce_sends
from tidings.core.errors import ProtocolError
from tidings.core.links.link import DIALLING, OPEN, WAITING, PeerConfig, PeerMessage, PeerUnreachable, RttMeasured
from tidings.core.links.peer_links import PeerLinks
from tidings.core.overlay.node_id import NodeRef
from tidings.core.wire import decoders, messages, peer
from tidings.core.wire.frames import FrameDecoder, frame
from tidings.core.wire.types import LinkType

MS = 1_000_000
CFG = PeerConfig(frame_bytes_max=1 << 16, handshake_timeout_ns=1000 * MS, peer_queue_bytes_max=4096,
                 ping_interval_ns=500 * MS)
SMALL = NodeRef(1, "10.0.0.1:1")
LARGE = NodeRef(2**127, "10.0.0.2:2")
MID = NodeRef(2**126, "10.0.0.3:3")


def split(output):
    """A PeerLinks output (one typed list: the runtime's effects first, then the items for the
    composer, in order) as (items, effects)."""
    kinds = [isinstance(x, PeerMessage | RttMeasured | PeerUnreachable) for x in output]
    assert kinds == sorted(kinds), "the effects come before the items"
    return [x for x, item in zip(output, kinds, strict=True) if item], [x for x, item in zip(output, kinds, strict=True)
                                                                       if not item]


class End:
    def __init__(self, owner, conn, server):
        self.owner, self.conn, self.server = owner, conn, server
        self.peer = None
        self.adopted = not server
        self.decoder = FrameDecoder(CFG.frame_bytes_max)
        self.closed = False
        self.lost = False
        self.client_bytes = b""  # what a server end that was never adopted got answered


class Net:
    def __init__(self, *refs, config=CFG, seed=None, at=None):
        at = at or [r.address for r in refs]  # where each node is reachable
        self.nodes = {a: PeerLinks(r, config) for a, r in zip(at, refs, strict=True)}
        self.listening = set(self.nodes)
        self.ends = {}
        self.queues = {}  # key -> deque of events; one FIFO per connection end, one per dial
        self.rng = random.Random(seed) if seed is not None else None
        self.now = 0
        self.got = {a: [] for a in self.nodes}
        self.unreachable = {a: [] for a in self.nodes}
        self.rtts = {a: [] for a in self.nodes}
        self.effects = {a: [] for a in self.nodes}
        self.dead = set()
        self._conn = 0
        self._dials = 0

    # ---- driving ----
    def send(self, src, dst, msg):
        self.apply(src, self.nodes[src].send(self.now, dst, msg))

    def output(self, address, result):
        assert address not in self.dead
        items, effects = split(result)
        for item in items:
            if isinstance(item, RttMeasured):
                self.rtts[address].append(item)
            elif isinstance(item, PeerUnreachable):
                self.unreachable[address].append(item.address)
            else:
                self.got[address].append((item.sender.address, item.message))
        self.apply(address, effects)

    def apply(self, address, effects):
        self.effects[address] += effects
        for eff in coalesce_sends(effects):
            if type(eff) is Send:
                end = self.ends[eff.conn]
                if not end.closed:
                    self._push(end.peer.conn, ("data", eff.data))
            elif type(eff) is Disconnect:
                end = self.ends[eff.conn]
                if not end.closed:
                    end.closed = True
                    self._push(end.peer.conn, ("lost", None))
                    self._push(end.conn, ("lost", None))
            elif type(eff) is Connect:
                self._dials += 1
                self._push(("dial", self._dials), ("dial", (address, eff.address)))

    def _push(self, key, event):
        self.queues.setdefault(key, deque()).append(event)

    def step(self):
        keys = [k for k, q in self.queues.items() if q]
        if not keys:
            return False
        key = self.rng.choice(keys) if self.rng else keys[0]
        kind, arg = self.queues[key].popleft()
        if kind == "dial":
            self._dial(*arg)
        elif kind == "data":
            self._data(self.ends[key], arg)
        else:
            self._lost(self.ends[key])
        return True

    def run(self, steps_max=10_000):
        for _ in range(steps_max):
            if not self.step():
                return
        raise AssertionError("the network did not settle")

    def _dial(self, src, dst):
        if src in self.dead:
            return
        if dst not in self.listening:
            self.output(src, self.nodes[src].connect_failed(self.now, dst, "refused"))
            return
        self._conn += 1
        client = End(src, self._conn, server=False)
        self._conn += 1
        server = End(dst, self._conn, server=True)
        client.peer, server.peer = server, client
        self.ends[client.conn] = client
        self.ends[server.conn] = server
        self.output(src, self.nodes[src].connected(self.now, client.conn, dst))

    def _data(self, end, data):
        if end.closed or end.lost:
            return
        node = self.nodes[end.owner]
        if end.adopted:
            self.output(end.owner, node.received(self.now, end.conn, data))
            return
        bodies = end.decoder.feed(data)
        if bodies:  # the broker's part: the first frame decides who owns the connection
            assert peer.unpack(bodies[0])[0] == LinkType.PEER_HELLO, "a peer connection starts with PEER_HELLO"
            end.adopted = True
            self.output(end.owner, node.adopt(self.now, end.conn, end.decoder, bodies[0], bodies[1:]))

    def _lost(self, end):
        if end.lost:
            return
        end.lost = True
        if end.adopted and self.nodes[end.owner].owns(end.conn):
            self.output(end.owner, self.nodes[end.owner].lost(self.now, end.conn))

    def kill(self, address):
        """kill -9: the node stops, the kernel closes its connections, its port refuses dials."""
        self.listening.discard(address)
        self.dead.add(address)
        for end in self.live_conns(address):
            end.closed = end.lost = True
            self._push(end.peer.conn, ("lost", None))

    def live_conns(self, address):
        return [e for e in self.ends.values() if e.owner == address and not e.closed and not e.lost]

    def links(self, address):
        return {row["address"]: row for row in self.nodes[address].status()}

    def tick(self, address, now):
        self.now = now
        self.output(address, self.nodes[address].handle_timeout(now))


def msg(i):
    return [100, i, b"x" * 10]


# ---- handshake --------------------------------------------------------------------------------------


def test_handshake_both_ways_over_one_connection():
    net = Net(SMALL, LARGE)
    net.send(SMALL.address, LARGE.address, msg(1))
    assert [type(e) for e in net.effects[SMALL.address]] == [Connect]
    net.run()
    assert net.got[LARGE.address] == [(SMALL.address, msg(1))]
    net.send(LARGE.address, SMALL.address, msg(2))  # the accepted connection carries replies
    net.run()
    assert net.got[SMALL.address] == [(LARGE.address, msg(2))]
    assert sum(isinstance(e, Connect) for e in net.effects[LARGE.address]) == 0
    for a, b in ((SMALL, LARGE), (LARGE, SMALL)):
        (row,) = net.links(a.address).values()
        assert row["state"] == OPEN and row["node_id"] == f"{b.node_id:032x}"
        assert row["address"] == b.address and row["queued_bytes"] == 0
    assert len(net.live_conns(SMALL.address)) == len(net.live_conns(LARGE.address)) == 1


def test_queued_messages_flush_in_order_once_welcomed():
    net = Net(SMALL, LARGE)
    for i in range(20):
        net.send(SMALL.address, LARGE.address, msg(i))
    assert sum(isinstance(e, Connect) for e in net.effects[SMALL.address]) == 1
    assert net.links(SMALL.address)[LARGE.address]["queued_bytes"] > 0
    net.run()
    assert net.got[LARGE.address] == [(SMALL.address, msg(i)) for i in range(20)]
    assert net.links(SMALL.address)[LARGE.address]["sent"] == 20
    assert net.links(LARGE.address)[SMALL.address]["received"] == 20
    assert net.nodes[SMALL.address].messages_dropped == 0


def test_the_queue_is_bounded_and_drops_are_counted():
    cfg = replace(CFG, peer_queue_bytes_max=100)
    net = Net(SMALL, LARGE, config=cfg)
    size = len(peer.encode(msg(0)))
    for i in range(10):
        net.send(SMALL.address, LARGE.address, msg(i))
    kept = 100 // size
    assert net.links(SMALL.address)[LARGE.address]["dropped"] == 10 - kept
    net.run()
    assert [m for _, m in net.got[LARGE.address]] == [msg(i) for i in range(kept)]
    assert net.nodes[SMALL.address].messages_dropped == 10 - kept


def test_a_blocked_link_queues_within_its_bound_and_flushes_when_drained():
    net = Net(SMALL, LARGE, config=replace(CFG, peer_queue_bytes_max=100))
    net.send(SMALL.address, LARGE.address, msg(0))
    net.run()
    links = net.nodes[SMALL.address]
    (end,) = net.live_conns(SMALL.address)
    assert links.flow(0, end.conn, blocked=True) == []
    size = len(peer.encode(msg(0)))
    effects = [e for i in range(1, 11) for e in links.send(0, LARGE.address, msg(i))]
    assert effects == [] and links.messages_dropped == 10 - 100 // size
    assert links.status()[0]["state"] == OPEN and links.status()[0]["queued_bytes"] == (100 // size) * size
    net.apply(SMALL.address, links.flow(0, end.conn, blocked=False))
    net.run()
    assert [m for _, m in net.got[LARGE.address]] == [msg(i) for i in range(1 + 100 // size)]
    assert links.flow(0, 12345, blocked=True) == []  # not a peer connection


def test_a_failed_dial_drops_the_queue_and_reports_the_address():
    net = Net(SMALL, LARGE)
    net.listening.discard(LARGE.address)
    net.send(SMALL.address, LARGE.address, msg(1))
    net.send(SMALL.address, LARGE.address, msg(2))
    net.run()
    assert net.unreachable[SMALL.address] == [LARGE.address]
    assert net.links(SMALL.address) == {} and net.nodes[SMALL.address].messages_dropped == 2
    assert "refused" in net.nodes[SMALL.address].last_failure
    net.listening.add(LARGE.address)  # a later send dials again
    net.send(SMALL.address, LARGE.address, msg(3))
    net.run()
    assert net.got[LARGE.address] == [(SMALL.address, msg(3))]


def test_the_runtime_reporting_one_message_per_input_sees_one_send_per_peer():
    net = Net(SMALL, LARGE)
    net.send(SMALL.address, LARGE.address, msg(0))
    net.run()
    links = net.nodes[SMALL.address]
    effects = [e for i in range(5) for e in links.send(0, LARGE.address, msg(i))]
    (joined,) = coalesce_sends(effects)
    assert FrameDecoder(1 << 20).feed(joined.data) == [msgpack.packb(msg(i)) for i in range(5)]


# ---- simultaneous dials -------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32), first=st.sampled_from([SMALL, LARGE]), count=st.integers(1, 4))
def test_simultaneous_dials_keep_one_connection_and_every_message(seed, first, count):
    check_simultaneous_dials(Net(SMALL, LARGE, seed=seed), first, count)


def check_simultaneous_dials(net: Net, first: NodeRef, count: int) -> None:
    """Both ends dial at once: one connection survives (the smaller nodeId's), nothing is lost."""
    a, b = (first, LARGE if first is SMALL else SMALL)
    for i in range(count):
        net.send(a.address, b.address, msg(i))
        net.send(b.address, a.address, msg(100 + i))
    net.run()
    assert net.got[b.address] == [(a.address, msg(i)) for i in range(count)]
    assert net.got[a.address] == [(b.address, msg(100 + i)) for i in range(count)]
    assert net.unreachable == {SMALL.address: [], LARGE.address: []}
    (small_end,) = net.live_conns(SMALL.address)
    (large_end,) = net.live_conns(LARGE.address)
    assert small_end.peer is large_end
    assert not small_end.server, "the connection kept is the one the smaller nodeId dialled"
    for node in (SMALL, LARGE):
        (row,) = net.links(node.address).values()
        assert row["state"] == OPEN


def play(net, refs, kind, a, b):
    src, dst = refs[a % 3].address, refs[b % 3].address
    if kind == "send" and src != dst:
        net.send(src, dst, msg(a * 10 + b))
    elif kind == "drop":  # a connection breaks (either end may notice first)
        live = [e for e in net.ends.values() if not e.closed and not e.lost]
        if live:
            end = live[(a * 9 + b) % len(live)]
            net.apply(end.owner, [Disconnect(end.conn, "dropped")])
    elif kind == "tick":
        net.now += b * 300 * MS
        for address in net.nodes:
            net.tick(address, net.now)
    else:
        for _ in range(a + 1):
            net.step()

ACTIONS = st.lists(st.tuples(st.sampled_from(["send", "drop", "tick", "step"]), st.integers(0, 8),
                             st.integers(0, 8)), max_size=60)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32), actions=ACTIONS)
def test_any_schedule_of_sends_drops_and_timers_settles_on_one_link_per_pair(seed, actions):
    refs = [SMALL, MID, LARGE]
    net = Net(*refs, seed=seed)
    for kind, a, b in actions:
        play(net, refs, kind, a, b)
    net.run()
    before = {address: len(got) for address, got in net.got.items()}
    for src in refs:
        for dst in refs:
            if src is not dst:
                net.send(src.address, dst.address, [101, src.address])
    net.run()
    for dst in refs:
        finals = [(sender, m) for sender, m in net.got[dst.address][before[dst.address]:] if m[0] == 101]
        assert sorted(finals) == sorted((r.address, [101, r.address]) for r in refs if r is not dst)
    for a, b in ((SMALL, MID), (SMALL, LARGE), (MID, LARGE)):
        pairs = [e for e in net.live_conns(a.address) if e.peer.owner == b.address]
        assert len(pairs) == 1, (a, b)
        assert net.links(a.address)[b.address]["state"] == OPEN


def test_the_larger_dialler_waits_for_the_smaller_ones_connection():
    net = Net(SMALL, LARGE)
    # LARGE's dial gets through first, SMALL's Connect is still out: SMALL refuses LARGE's HELLO
    net.send(SMALL.address, LARGE.address, msg(1))
    net.send(LARGE.address, SMALL.address, msg(2))
    small_dial = next(k for k in net.queues if k[0] == "dial")
    net.queues[small_dial], held = deque(), net.queues[small_dial]
    net.run()
    assert net.links(LARGE.address)[SMALL.address]["state"] == WAITING
    assert net.links(SMALL.address)[LARGE.address]["state"] == DIALLING
    net.queues[small_dial] = held
    net.run()
    assert net.got[LARGE.address] == [(SMALL.address, msg(1))]
    assert net.got[SMALL.address] == [(LARGE.address, msg(2))]


def test_waiting_gives_up_after_the_handshake_timeout():
    net = Net(SMALL, LARGE)
    net.send(SMALL.address, LARGE.address, msg(1))
    net.send(LARGE.address, SMALL.address, msg(2))
    small_dial = next(k for k in net.queues if k[0] == "dial")
    net.queues[small_dial].clear()  # SMALL's dial never completes (and is never reported)
    net.run()
    assert net.links(LARGE.address)[SMALL.address]["state"] == WAITING
    deadline = net.nodes[LARGE.address].next_deadline()
    assert deadline == CFG.handshake_timeout_ns
    net.tick(LARGE.address, deadline)
    assert net.unreachable[LARGE.address] == [SMALL.address]
    assert net.nodes[LARGE.address].messages_dropped == 1


def test_a_restarted_peer_replaces_the_old_connection():
    net = Net(SMALL, LARGE)
    net.send(LARGE.address, SMALL.address, msg(1))  # LARGE dials: SMALL holds an inbound link
    net.run()
    (old,) = net.live_conns(SMALL.address)
    net.nodes[LARGE.address] = PeerLinks(LARGE, CFG)  # LARGE restarts before SMALL heard of the loss
    net.send(LARGE.address, SMALL.address, msg(2))
    net.run()
    assert [m for _, m in net.got[SMALL.address]] == [msg(1), msg(2)]
    assert old.closed and len(net.live_conns(SMALL.address)) == 1
    assert net.unreachable[SMALL.address] == []


# ---- versions (wire/peer.py "Versions") ---------------------------------------------------------------------

OLD = replace(CFG, version_max=1)  # a broker of version 1 (before complete nacks): it speaks 1 alone


def greetings(net, address, kind):
    """The versions of the PEER_HELLOs or PEER_WELCOMEs (`kind`) `address` sent, in order."""
    out = []
    for eff in net.effects[address]:
        if type(eff) is Send:
            for body in FrameDecoder(1 << 20).feed(eff.data):
                message = peer.unpack(body)
                if message[0] == kind:
                    out.append(message[1])
    return out


def versions(net):
    return {a: {peer_address: row["version"] for peer_address, row in net.links(a).items()} for a in net.nodes}


def test_two_brokers_of_this_version_link_in_it_and_both_say_they_take_complete_nacks():
    net = Net(SMALL, LARGE)
    net.send(SMALL.address, LARGE.address, msg(1))
    net.run()
    assert greetings(net, SMALL.address, LinkType.PEER_HELLO) == [peer.PEER_VERSION]
    assert greetings(net, LARGE.address, LinkType.PEER_WELCOME) == [peer.PEER_VERSION]
    assert net.nodes[SMALL.address].speaks(LARGE.address, peer.COMPLETE_NACKS)
    assert net.nodes[LARGE.address].speaks(SMALL.address, peer.COMPLETE_NACKS)


def test_dialling_an_older_broker_steps_down_to_its_version_and_loses_nothing():
    """An older acceptor refuses any version but its own: the dialler dials again at once saying
    the version before, keeps its queue, and reports nobody unreachable; neither end then takes the
    other for one that understands complete nacks."""
    net = Net(SMALL, LARGE)
    net.nodes[LARGE.address] = PeerLinks(LARGE, OLD)
    net.send(SMALL.address, LARGE.address, msg(1))
    net.send(SMALL.address, LARGE.address, msg(2))
    net.run()
    assert net.got[LARGE.address] == [(SMALL.address, msg(1)), (SMALL.address, msg(2))]
    assert greetings(net, SMALL.address, LinkType.PEER_HELLO) == [2, 1]
    assert net.unreachable == {SMALL.address: [], LARGE.address: []}
    assert versions(net) == {SMALL.address: {LARGE.address: 1}, LARGE.address: {SMALL.address: 1}}
    assert not net.nodes[SMALL.address].speaks(LARGE.address, peer.COMPLETE_NACKS)
    net.send(LARGE.address, SMALL.address, msg(3))  # the one connection carries both ways
    net.run()
    assert net.got[SMALL.address] == [(LARGE.address, msg(3))] and len(net.live_conns(SMALL.address)) == 1


def test_an_older_broker_dialling_is_welcomed_in_its_own_version():
    net = Net(SMALL, LARGE)
    net.nodes[SMALL.address] = PeerLinks(SMALL, OLD)
    net.send(SMALL.address, LARGE.address, msg(1))
    net.run()
    assert net.got[LARGE.address] == [(SMALL.address, msg(1))]
    assert greetings(net, LARGE.address, LinkType.PEER_WELCOME) == [1]
    assert not net.nodes[LARGE.address].speaks(SMALL.address, peer.COMPLETE_NACKS)


def test_a_link_lost_to_an_older_broker_asks_for_the_newest_version_again():
    """The peer may come back upgraded: the redial says this broker's version first again."""
    net = Net(SMALL, LARGE)
    net.nodes[LARGE.address] = PeerLinks(LARGE, OLD)
    net.send(SMALL.address, LARGE.address, msg(1))
    net.run()
    net.nodes[LARGE.address] = PeerLinks(LARGE, CFG)  # LARGE upgraded and restarted
    (end,) = net.live_conns(SMALL.address)
    net.apply(SMALL.address, [Disconnect(end.conn, "test")])  # its old connection drops
    net.run()
    assert greetings(net, SMALL.address, LinkType.PEER_HELLO) == [2, 1, 2]
    assert net.nodes[SMALL.address].speaks(LARGE.address, peer.COMPLETE_NACKS)


# ---- loss, timeouts, RTT -----------------------------------------------------------------------------------


def test_a_lost_link_is_redialled_and_reported_only_if_that_fails():
    net = Net(SMALL, LARGE)
    net.send(SMALL.address, LARGE.address, msg(1))
    net.run()
    (end,) = net.live_conns(LARGE.address)
    net.apply(LARGE.address, [Disconnect(end.conn, "test")])  # the connection drops
    net.run()
    assert net.unreachable == {SMALL.address: [], LARGE.address: []}
    assert len(net.live_conns(SMALL.address)) == 1 and net.links(SMALL.address)[LARGE.address]["state"] == OPEN
    net.kill(LARGE.address)  # now the broker dies: the redial is refused
    net.run()
    assert net.unreachable[SMALL.address] == [LARGE.address]
    assert LARGE.address not in net.links(SMALL.address)


def test_no_welcome_within_the_handshake_timeout():
    net = Net(SMALL, LARGE)
    net.send(SMALL.address, LARGE.address, msg(1))
    net.step()  # the dial completes; the HELLO sits unread
    deadline = net.nodes[SMALL.address].next_deadline()
    assert deadline == CFG.handshake_timeout_ns
    net.tick(SMALL.address, deadline - 1)
    assert net.unreachable[SMALL.address] == []
    net.tick(SMALL.address, deadline)
    assert net.unreachable[SMALL.address] == [LARGE.address]
    (body,) = FrameDecoder(1 << 20).feed(net.effects[SMALL.address][-2].data)
    assert peer.decode_link_message(peer.unpack(body)) == peer.PeerError(
        "handshake-timeout", "no PEER_WELCOME within the handshake timeout")


def test_ping_pong_measures_the_rtt_from_now_values():
    net = Net(SMALL, LARGE)
    net.send(SMALL.address, LARGE.address, msg(1))
    while net.links(SMALL.address).get(LARGE.address, {}).get("state") != OPEN:
        assert net.step()
    # SMALL just pinged at now=0 as the link opened; the PONG comes back at 7 ms
    net.now = 7 * MS
    net.run()
    assert RttMeasured(LARGE.address, 7 * MS) in net.rtts[SMALL.address]
    assert net.links(SMALL.address)[LARGE.address]["rtt_ms"] == 7.0
    # the next ping is due one interval after the first
    links = net.nodes[SMALL.address]
    assert links.next_deadline() == CFG.ping_interval_ns
    net.tick(SMALL.address, CFG.ping_interval_ns)
    net.now = CFG.ping_interval_ns + 3 * MS
    net.run()
    assert net.rtts[SMALL.address][-1] == RttMeasured(LARGE.address, 3 * MS)


def test_probe_pings_an_open_link_and_dials_an_unknown_one():
    net = Net(SMALL, LARGE)
    effects = net.nodes[SMALL.address].probe(0, LARGE.address)
    assert effects == [Connect(LARGE.address)]
    net.apply(SMALL.address, effects)
    net.run()
    assert any(r.address == LARGE.address for r in net.rtts[SMALL.address])
    count = len(net.rtts[SMALL.address])
    net.now = 50 * MS
    net.apply(SMALL.address, net.nodes[SMALL.address].probe(10 * MS, LARGE.address))
    net.run()
    assert len(net.rtts[SMALL.address]) == count + 1 and net.rtts[SMALL.address][-1].rtt_ns == 40 * MS


def test_a_silent_peer_is_dropped_and_redialled():
    net = Net(SMALL, LARGE)
    net.send(SMALL.address, LARGE.address, msg(1))
    net.run()
    links = net.nodes[SMALL.address]
    now = 0
    for _ in range(10):  # pings go out but LARGE's answers never arrive (they are discarded)
        now = links.next_deadline()
        net.tick(SMALL.address, now)
        for key, q in net.queues.items():
            if key in net.ends and net.ends[key].owner == SMALL.address:
                q.clear()
        if any(isinstance(e, Connect) for e in net.effects[SMALL.address][1:]):
            break
    assert now == 3 * CFG.ping_interval_ns
    assert any(type(e) is Disconnect and "silent" in e.reason for e in net.effects[SMALL.address])


# ---- bad input -------------------------------------------------------------------------------------------


def open_pair():
    net = Net(SMALL, LARGE)
    net.send(SMALL.address, LARGE.address, msg(0))
    net.run()
    (end,) = net.live_conns(LARGE.address)
    return net, end


def answers(net, address):
    """The frames `address` sent in its last effects, decoded, and whether it disconnected."""
    effects = net.effects[address]
    bodies = [b for e in effects if type(e) is Send for b in FrameDecoder(1 << 20).feed(e.data)]
    return [peer.unpack(b) for b in bodies], any(type(e) is Disconnect for e in effects)


@pytest.mark.parametrize(("data", "code"), [
    (b"\x00\x00\x00\x03\xc1\xc1\xc1", "bad-message"),  # a frame that is not msgpack
    (frame(msgpack.packb({"a": 1})), "bad-message"),  # not an array
    (frame(msgpack.packb([LinkType.PING])), "bad-message"),  # PING without its seq
    (frame(msgpack.packb([LinkType.PONG, -1])), "bad-message"),
    (frame(msgpack.packb([LinkType.PEER_HELLO, 1, SMALL.to_wire()])), "handshake"),  # a second HELLO
    (frame(msgpack.packb([200, 1])), "unknown-message"),
    (frame(msgpack.packb([7, 1])), "unknown-message"),  # a client message type
    (b"\x7f\xff\xff\xff" + b"garbage", "frame-too-large"),
])
def test_garbage_on_a_peer_link_gets_a_peer_error_and_a_close(data, code):
    net, end = open_pair()
    net.effects[LARGE.address] = []
    net.output(LARGE.address, net.nodes[LARGE.address].received(0, end.conn, data))
    sent, closed = answers(net, LARGE.address)
    assert closed and sent[-1][0] == LinkType.PEER_ERROR and sent[-1][1] == code
    assert net.unreachable[LARGE.address] == [SMALL.address]
    assert net.nodes[LARGE.address].received(0, end.conn, peer.ping(1)) == []  # closing: ignored


def test_messages_of_other_layers_pass_through_raw():
    net, end = open_pair()
    data = b"".join(peer.encode(m) for m in ([64, "x"], [96, {"k": 1}], [140, None], [127]))
    items, effects = split(net.nodes[LARGE.address].received(0, end.conn, data))
    assert [(i.sender, i.message) for i in items] == [(SMALL, [64, "x"]), (SMALL, [96, {"k": 1}]), (SMALL, [140, None]),
                                          (SMALL, [127])]
    assert effects == []


def test_a_message_before_the_welcome_is_a_handshake_error():
    net = Net(SMALL, LARGE)
    net.send(SMALL.address, LARGE.address, msg(0))
    net.step()
    (conn,) = [e.conn for e in net.ends.values() if e.owner == SMALL.address]
    _, effects = split(net.nodes[SMALL.address].received(0, conn, peer.encode([70, 1])))
    assert isinstance(effects[-1], Disconnect)
    body = FrameDecoder(1 << 20).feed(effects[0].data)[0]
    assert peer.unpack(body)[:2] == [LinkType.PEER_ERROR, "handshake"]


@pytest.mark.parametrize("hello", [
    msgpack.packb([LinkType.PEER_HELLO]),
    msgpack.packb([LinkType.PEER_HELLO, 1, [b"short", "a:1"]]),
    msgpack.packb([LinkType.PEER_HELLO, 1, [b"\x00" * 16, ""]]),
    msgpack.packb([LinkType.PEER_HELLO, "1", SMALL.to_wire()]),
    msgpack.packb([LinkType.PEER_HELLO, 1, SMALL.to_wire(), "extra"]),
])
def test_a_malformed_hello_gets_a_client_error_frame(hello):
    links = PeerLinks(LARGE, CFG)
    items, effects = split(links.adopt(0, 9, FrameDecoder(CFG.frame_bytes_max), hello, []))
    assert items == [] and isinstance(effects[-1], Disconnect)
    (body,) = FrameDecoder(1 << 20).feed(effects[0].data)
    err = decoders.decode_broker_message(body)
    assert isinstance(err, messages.Error) and err.code == "handshake" and "PEER_HELLO" in err.message
    assert links.status() == []


@pytest.mark.parametrize(("hello", "code"), [
    (peer.hello(SMALL, version=99), "version-mismatch"),
    (peer.hello(NodeRef(LARGE.node_id, "elsewhere:1")), "handshake"),  # our own nodeId
])
def test_a_hello_we_cannot_accept_gets_a_peer_error(hello, code):
    links = PeerLinks(LARGE, CFG)
    (body,) = FrameDecoder(1 << 20).feed(hello)
    _, effects = split(links.adopt(0, 9, FrameDecoder(CFG.frame_bytes_max), body, []))
    assert isinstance(effects[-1], Disconnect)
    assert peer.unpack(FrameDecoder(1 << 20).feed(effects[0].data)[0])[:2] == [LinkType.PEER_ERROR, code]


def test_frames_after_the_hello_are_handled_on_adoption():
    links = PeerLinks(LARGE, CFG)
    rest = [msgpack.packb([70, i]) for i in range(3)]
    decoder = FrameDecoder(CFG.frame_bytes_max)
    decoder.feed(peer.encode([70, 3])[:5])  # a partial frame waits in the decoder
    items, effects = split(links.adopt(0, 9, decoder, msgpack.packb([LinkType.PEER_HELLO, 1, SMALL.to_wire()]), rest))
    assert [i.message for i in items] == [[70, 0], [70, 1], [70, 2]]
    assert peer.unpack(FrameDecoder(1 << 20).feed(effects[0].data)[0])[0] == LinkType.PEER_WELCOME
    items, _ = split(links.received(0, 9, peer.encode([70, 3])[5:]))
    assert [i.message for i in items] == [[70, 3]]


def test_reject_closes_the_link_without_reporting_it():
    net, _ = open_pair()
    effects = net.nodes[LARGE.address].reject(0, SMALL.address, "bad overlay message")
    assert isinstance(effects[-1], Disconnect) and net.links(LARGE.address) == {}
    assert net.unreachable[LARGE.address] == []
    assert net.nodes[LARGE.address].reject(0, SMALL.address, "again") == []


def test_a_peer_error_from_the_peer_drops_the_link():
    net, end = open_pair()
    net.output(LARGE.address, net.nodes[LARGE.address].received(0, end.conn, peer.peer_error("x", "y")))
    assert net.unreachable[LARGE.address] == [SMALL.address]
    assert "peer error x: y" in net.nodes[LARGE.address].last_failure


def test_an_open_link_the_peer_calls_superseded_is_redialled():
    net, end = open_pair()
    net.output(LARGE.address, net.nodes[LARGE.address].received(0, end.conn, peer.peer_error(
        errors.DUPLICATE_LINK, "replaced by a newer connection")))
    net.run()
    assert net.unreachable[LARGE.address] == [] and net.links(LARGE.address)[SMALL.address]["state"] == OPEN
    assert len(net.live_conns(LARGE.address)) == 1


def test_a_peer_advertising_another_address_is_known_by_both():
    other = NodeRef(LARGE.node_id, "advertised:2")
    net = Net(SMALL, other, at=[SMALL.address, LARGE.address])  # it is reachable at LARGE.address
    net.send(SMALL.address, LARGE.address, msg(1))
    net.run()
    assert set(net.links(SMALL.address)) == {other.address}
    net.send(SMALL.address, other.address, msg(2))
    net.send(SMALL.address, LARGE.address, msg(3))
    net.run()
    assert [m for _, m in net.got[LARGE.address]] == [msg(1), msg(2), msg(3)]
    assert sum(isinstance(e, Connect) for e in net.effects[SMALL.address]) == 1


# ---- the codec -----------------------------------------------------------------------------------------


def test_codec_round_trips():
    for data, expected in [(peer.hello(SMALL), peer.PeerHello(peer.PEER_VERSION, SMALL)),
                           (peer.welcome(LARGE), peer.PeerWelcome(peer.PEER_VERSION, LARGE)),
                           (peer.welcome(LARGE, 1), peer.PeerWelcome(1, LARGE)),
                           (peer.ping(5), peer.Ping(5)), (peer.pong(2**63 - 1), peer.Pong(2**63 - 1)),
                           (peer.peer_error("c", "m" * 5000), peer.PeerError("c", "m" * 1024))]:
        (body,) = FrameDecoder(1 << 20).feed(data)
        assert peer.decode_link_message(peer.unpack(body)) == expected
    assert peer.decode_hello(FrameDecoder(1 << 20).feed(peer.hello(SMALL))[0]) == peer.PeerHello(peer.PEER_VERSION,
                                                                                                SMALL)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=8)
                    | st.binary(max_size=20),
                    lambda c: st.lists(c, max_size=5), max_leaves=12))
def test_the_decoders_raise_only_protocol_errors(value):
    body = msgpack.packb(value)
    for decode in (lambda: peer.decode_link_message(peer.unpack(body)), lambda: peer.decode_hello(body)):
        with contextlib.suppress(ProtocolError):
            decode()
    if isinstance(value, list) and value and type(value[0]) is int:
        value[0] = LinkType.PEER_HELLO if len(value) % 2 else LinkType.PONG
        with contextlib.suppress(ProtocolError):
            peer.decode_link_message(value)


# ---- a dial still out when its link is dropped ---------------------------------------------------------


def hello_body(ref):
    return FrameDecoder(CFG.frame_bytes_max).feed(peer.hello(ref))[0]


def test_a_new_link_takes_over_the_dial_still_out_after_the_peer_timed_out_its_handshake():
    """LARGE dials SMALL; SMALL's own dial reaches LARGE first and LARGE (the larger id) welcomes
    it, so the link opens while LARGE's Connect is still out (a loaded machine: its Connected comes
    late). SMALL, which did not get the welcome within its handshake timeout, sends PEER_ERROR
    handshake-timeout: LARGE drops the link. The next message to SMALL must not dial a second time
    (this raised `assert link.address not in self._dialling` out of `_dial`): the new link waits in
    DIALLING for the dial still out, and opens or is reported unreachable with it."""
    links = PeerLinks(LARGE, CFG)
    assert links.send(0, SMALL.address, msg(1)) == [Connect(SMALL.address)]
    accepted = links.adopt(0, 10, FrameDecoder(CFG.frame_bytes_max), hello_body(SMALL), [])
    assert Send(10, peer.welcome(LARGE)) in accepted and links.status()[0]["state"] == OPEN
    items, _ = split(links.received(1, 10, peer.peer_error(errors.HANDSHAKE_TIMEOUT, "no PEER_WELCOME")))
    assert items == [PeerUnreachable(SMALL.address)] and links.status() == []

    assert links.send(2, SMALL.address, msg(2)) == []  # the Connect still out takes over
    assert links.probe(2, SMALL.address) == []
    assert [(r["address"], r["state"], r["queued_bytes"] > 0) for r in links.status()] == [
        (SMALL.address, DIALLING, True)]
    assert split(links.connected(3, 11, SMALL.address)) == ([], [Send(11, peer.hello(LARGE))])
    _, effects = split(links.received(3, 11, peer.welcome(SMALL)))
    assert next(e.data for e in effects if type(e) is Send) == peer.encode(msg(2))
    assert links.status()[0]["state"] == OPEN


def test_a_dial_still_out_that_fails_reports_the_new_link():
    links = PeerLinks(LARGE, CFG)
    links.send(0, SMALL.address, msg(1))
    links.adopt(0, 10, FrameDecoder(CFG.frame_bytes_max), hello_body(SMALL), [])
    links.received(1, 10, peer.peer_error(errors.HANDSHAKE_TIMEOUT, "no PEER_WELCOME"))
    assert links.send(2, SMALL.address, msg(2)) == []
    assert split(links.connect_failed(3, SMALL.address, "refused")) == ([PeerUnreachable(SMALL.address)], [])
    assert links.status() == []
    assert links.send(4, SMALL.address, msg(3)) == [Connect(SMALL.address)]  # a fresh dial


def test_a_dropped_link_known_by_its_advertised_address_is_dialled_afresh_once():
    """A peer dialled at one address that advertises another is keyed by the advertised one, the
    dialled one kept as an alias. Once that link is dropped, the alias must not hide the new link
    keyed by the dialled address: each message replaced it and dialled again (the assertion, and
    the queue of the replaced link lost)."""
    other = NodeRef(LARGE.node_id, "advertised:2")
    links = PeerLinks(SMALL, CFG)
    links.send(0, LARGE.address, msg(1))
    links.connected(0, 1, LARGE.address)
    links.received(0, 1, peer.welcome(other))
    assert [r["address"] for r in links.status()] == [other.address]
    assert links.lost(1, 1) == [Connect(other.address)]  # an open link is redialled where it advertises
    assert split(links.connect_failed(2, other.address, "refused")) == ([PeerUnreachable(other.address)], [])
    assert links.send(3, LARGE.address, msg(2)) == [Connect(LARGE.address)]
    assert links.send(3, LARGE.address, msg(3)) == []
    links.connected(4, 2, LARGE.address)
    _, effects = split(links.received(4, 2, peer.welcome(other)))
    sent = [e.data for e in effects if type(e) is Send]
    assert sent[:2] == [peer.encode(msg(2)), peer.encode(msg(3))]
