"""The message-level network: latency from the model, order per pair, loss, silence and resets."""

from __future__ import annotations

from tidings.core.overlay.node import OverlayConfig
from tidings.core.units import MILLISECOND_NS, SECOND_NS
from tidings.sim.overlay.build import install_steady
from tidings.sim.overlay.lookups import LookupRun, lookup_members
from tidings.sim.overlay.net import MessageNet
from tidings.sim.overlay.sim import OverlaySim
from tidings.sim.overlay.topology import MatrixTopology
from tidings.sim.world import World


def three_hosts(**options) -> tuple[World, MessageNet, list[tuple[int, int, int, object]]]:
    world = World(5)
    events: list[tuple[int, int, int, object]] = []
    topology = MatrixTopology.parse("0 20 40\n20 0 60\n40 60 0\n")
    net = MessageNet(world, topology, lambda s, d, m: events.append((world.now, s, d, m[0])),
                     lambda s, d, m: events.append((world.now, s, d, ("lost", m[0]))), **options)
    for host in range(3):
        net.bring_up(host)
    return world, net, events


def test_messages_arrive_after_half_the_rtt_plus_jitter_and_in_order_per_pair():
    world, net, events = three_hosts(jitter_fraction=0.5)
    for i in range(50):
        net.send(0, 1, [i])
    net.send(0, 2, ["far"])
    world.run()
    to_1 = [e for e in events if e[2] == 1]
    assert [e[3] for e in to_1] == list(range(50))
    assert all(10 * MILLISECOND_NS <= e[0] <= 15 * MILLISECOND_NS for e in to_1)
    assert [e[3] for e in events if e[2] == 2] == ["far"]


def test_silence_is_noticed_by_the_sender_only_after_its_timeout_and_a_crash_by_a_reset():
    world, net, events = three_hosts(jitter_fraction=0.0, unanswered_timeout_ns=2 * SECOND_NS)
    net.fail_silently(1)
    net.crash(2)
    net.send(0, 1, ["hello"])
    net.send(0, 2, ["hello"])
    world.run()
    assert events == [(40 * MILLISECOND_NS, 0, 2, ("lost", "hello")),  # 20 ms there, 20 ms back
                      (10 * MILLISECOND_NS + 2 * SECOND_NS, 0, 1, ("lost", "hello"))]


def test_a_restarted_host_does_not_get_what_was_sent_to_its_earlier_incarnation():
    world, net, events = three_hosts(jitter_fraction=0.0)
    net.send(0, 1, ["old"])
    net.crash(1)
    net.bring_up(1)
    net.send(0, 1, ["new"])
    world.run()
    assert [e[3] for e in events] == ["new", ("lost", "old")]


def test_lost_messages_lose_lookups_but_never_misroute_one():
    config = OverlayConfig()
    sim = OverlaySim(500, 9, lookup_members(config), loss_probability=0.01)
    install_steady(sim, config, sim.world.derive_rng("build"))
    result = LookupRun(sim, 2000, sim.world.derive_rng("lookups")).run(deadline_ns=5 * SECOND_NS)
    assert result.wrong == 0
    assert 0 < result.lost < 200  # about 1% per hop, ~2.5 hops
    assert sim.net.messages_lost > 0
