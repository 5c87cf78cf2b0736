"""Two ways to bring an overlay of n brokers into being: real joins, or the converged state directly.

Theory of operation.

`join_all` plays the protocol: host 0 founds the overlay; host i starts `spacing_ns` after host
i-1 and joins through a bootstrap. Pastry assumes a newcomer knows a nearby member (an expanding-ring
search in practice); here the bootstrap is the nearest of `bootstrap_sample` hosts drawn at random
among those already joined. Joins overlap (the spacing is shorter than a join), as they would in a
real deployment that starts many brokers at once. The build then waits until every host has
completed its join, and `settle_ns` more for announcements, probes and leaf-set repairs to land.

`install_steady` skips the protocol: every host gets a member that is started as the founder of an
overlay of its own (which sends nothing and arms its keep-alive and repair timers), and its leaf
set, routing table (with the model's RTT for each entry) and neighbourhood set are then filled with
the state the joins converge to, computed by `SteadyState` (steady.py). The member's routing code
is untouched: lookups over this overlay run the real `route_step`. On its first input a member
notices the new leaf set and starts tracking its leaves' liveness, as after a join, sending each
leaf its leaf set (16 messages of 17 nodes per broker: at 100,000 brokers, 1.6 million messages
and most of the overlay's work in the first second). With `announce=False` (the Scribe experiment)
the member is told instead that its leaves already know it (`OverlayNode.leaf_set_known`), which is
what the converged state means, and that exchange is skipped.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tidings.core.overlay.node import OverlayConfig
from tidings.core.units import MILLISECOND_NS, SECOND_NS
from tidings.sim.overlay.sim import OverlaySim
from tidings.sim.overlay.steady import SteadyState

Progress = Callable[[int, int], None]


def join_all(sim: OverlaySim, rng: random.Random, spacing_ns: int = 5 * MILLISECOND_NS,
             settle_ns: int = 5 * SECOND_NS, bootstrap_sample: int = 16,
             progress: Progress | None = None) -> bool:
    """Join hosts 0..n-1 through the protocol; True when every one completed its join."""
    world = sim.world
    start = world.now
    joined: list[int] = []
    for host in range(sim.n):
        world.call_at(start + host * spacing_ns, _start_one, sim, host, joined, rng, bootstrap_sample)
    step = max(1, sim.n // 20)
    deadline = start + sim.n * spacing_ns + 60 * SECOND_NS
    done = 0
    while done < sim.n:
        target = min(sim.n, done + step)
        def all_joined(t: int = target) -> bool:
            return bool(sim.counts["joins"] >= t)

        if not world.run_until(all_joined, deadline):
            return False
        done = sim.counts["joins"]
        if progress is not None:
            progress(done, sim.n)
    sim.run(settle_ns)
    return all(sim.joined[h] for h in range(sim.n))


def _start_one(sim: OverlaySim, host: int, joined: list[int], rng: random.Random, sample: int) -> None:
    candidates = [h for h in joined if sim.joined[h]]
    if not candidates:
        sim.start(host, None)
    else:
        drawn = [candidates[rng.randrange(len(candidates))] for _ in range(min(sample, len(candidates)))]
        sim.start(host, sim.topology.nearest(host, drawn))
    joined.append(host)


def install_steady(sim: OverlaySim, config: OverlayConfig, rng: random.Random, sample_max: int = 16,
                   progress: Progress | None = None, announce: bool = True, hosts: range | None = None) -> None:
    """Give every host a member holding the converged Pastry state (see the module docstring);
    `config` is the members' overlay configuration (leaf set and neighbourhood sizes). Without
    `announce`, members take their leaf sets as already known to their leaves (`leaf_set_known`)
    and skip the exchange of leaf sets on their first input. `hosts` (all by default) are the
    hosts that take part; the others stay down (to join later by the protocol)."""
    hosts = range(sim.n) if hosts is None else hosts
    state = SteadyState(sim.ids, hosts, sim.topology, rng, leaf_set_size=config.leaf_set_size,
                        sample_max=sample_max, neighbourhood_size=config.neighbourhood_size)
    now, refs, rtt = sim.world.now, sim.refs, sim.topology.rtt_ns
    step = max(1, len(hosts) // 20)
    for done, host in enumerate(hosts, start=1):
        member = sim.make_member(refs[host], sim.members_rng)
        sim.members[host] = member
        sim.net.bring_up(host)
        effects = member.start(now, None)
        node = member.overlay  # type: ignore[attr-defined]
        entries = state.routing_entries(host)
        leaves = state.leaves(host)
        for other in entries:
            node.routing_table.add(refs[other], rtt(host, other))
        for other in leaves:
            node.leaf_set.add(refs[other])
        for other in state.neighbours(host, entries + leaves):
            node.neighbourhood.add(refs[other], rtt(host, other))
        if not announce:  # a composer (ClusterMember.settle) hands LeafSetChanged to Scribe
            known = node.leaf_set_known(now)
            settle = getattr(member, "settle", None)
            effects += known if settle is None else settle(now, known)
        sim.apply(host, effects)
        if progress is not None and done % step == 0:
            progress(done, len(hosts))
