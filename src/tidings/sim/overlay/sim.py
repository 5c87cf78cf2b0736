"""The overlay simulation: many brokers' overlay cores on one World, joined by the message network.

Theory of operation. Each host h (0..n-1) runs one member machine: a `LookupMember` (Pastry alone,
for the routing experiments) or the broker's `ClusterMember` (Pastry and Scribe, for the tree
tests). The simulation plays the runtime's part for every host, exactly as the asyncio broker does
for one:

- a `PeerSend(address, message)` goes through the `MessageNet` and arrives as `received(...)`;
- a `Probe(address)` is answered from the topology: `rtt_measured` one RTT later when the target is
  up, `peer_unreachable` one RTT later when it crashed (the probe's connection is refused), and
  `peer_unreachable` after `probe_timeout_ns` when it failed silently (nothing ever answers);
- a message to a crashed host resets the connection, one to a silently failed host is never
  answered and times out (see net.py); either way the sender hears `peer_unreachable`, and a member
  with an `undelivered(now, message)` input (the lookup member) gets the message back to re-route;
- timers: each host has at most one World timer, at the member's `next_deadline()`, re-armed after
  every input it was given (a timer that would not change is left alone);
- every other effect (a lookup delivered, a Scribe event delivered) goes to `on_effect(host, eff)`,
  which the experiment or the test sets.

Faults: `fail_silently(h)` freezes a host (its machine is never called again and nothing it was
sent is answered); `crash(h)` drops its machine (soft state lost) and resets its connections;
`restart(h)` gives it a fresh machine with the same nodeId, which joins again through a live host.

Addresses are `n<index>`, so a host is found from an address without a table. Memory per host: a
NodeRef, the machine, a timer slot; the members share one seeded random stream (the simulation is
single-threaded, so the order of draws is the order of events, which is deterministic).
"""

from __future__ import annotations

import random
from array import array
from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from tidings.core.overlay.envelope import PeerSend
from tidings.core.overlay.events import JoinCompleted, LeafSetChanged, NodeFailed, Probe
from tidings.core.overlay.node_id import NodeRef, closer, node_id_from
from tidings.core.units import SECOND_NS
from tidings.sim.overlay.net import SILENT, MessageNet
from tidings.sim.overlay.topology import Topology, make_topology
from tidings.sim.world import Timer, World

PROBE_TIMEOUT_NS = 2 * SECOND_NS
NO_DEADLINE = -1


class Member(Protocol):
    """What the simulation drives: the shape of `ClusterMember`'s inputs."""

    me: NodeRef

    def start(self, now: int, bootstrap: str | None) -> list[Any]: ...
    def received(self, now: int, sender: str, message: list[Any]) -> list[Any]: ...
    def rtt_measured(self, now: int, address: str, rtt_ns: int) -> list[Any]: ...
    def peer_unreachable(self, now: int, address: str) -> list[Any]: ...
    def handle_timeout(self, now: int) -> list[Any]: ...
    def next_deadline(self) -> int | None: ...


def host_of(address: str) -> int:
    return int(address[1:])


class OverlaySim:
    def __init__(self, n: int, seed: int, make_member: Callable[[NodeRef, random.Random], Member],
                 model: str = "plane",
                 topology: Topology | None = None, loss_probability: float = 0.0,
                 jitter_fraction: float = 0.1, probe_timeout_ns: int = PROBE_TIMEOUT_NS) -> None:
        self.world = World(seed)
        self.n = n
        self.topology = topology or make_topology(model, n, self.world.derive_rng("topology"))
        self.ids = [node_id_from(f"sim-broker-{h}/seed-{seed}") for h in range(n)]
        self.refs = [NodeRef(self.ids[h], f"n{h}") for h in range(n)]
        self.make_member = make_member
        self.members_rng = self.world.derive_rng("members")
        self.members: list[Member | None] = [None] * n
        self.joined = bytearray(n)
        self._timers: list[Timer | None] = [None] * n
        self._deadlines = array("q", [NO_DEADLINE]) * n
        self.probe_timeout_ns = probe_timeout_ns
        self.net = MessageNet(self.world, self.topology, self._arrival, self._lost,
                              loss_probability=loss_probability, jitter_fraction=jitter_fraction,
                              unanswered_timeout_ns=probe_timeout_ns)
        self.on_effect: Callable[[int, Any], None] = self._unexpected
        self.counts = {"probes": 0, "failures_declared": 0, "leaf_set_changes": 0, "joins": 0}

    # ---- the runtime's part ----------------------------------------------------------------------

    def apply(self, host: int, effects: list[Any]) -> None:
        """Carry out a member's effects, then re-arm its timer."""
        for eff in effects:
            kind = type(eff)
            if kind is PeerSend:
                self.net.send(host, host_of(eff.address), eff.message)
            elif kind is Probe:
                self._probe(host, host_of(eff.address))
            elif kind is LeafSetChanged:
                self.counts["leaf_set_changes"] += 1
            elif kind is JoinCompleted:
                self.joined[host] = 1
                self.counts["joins"] += 1
                self.world.trace(f"n{host}", "joined")
            elif kind is NodeFailed:
                self.counts["failures_declared"] += 1
                self.world.trace(f"n{host}", "declared-failed", eff.node.address)
            else:
                self.on_effect(host, eff)
        self._arm(host)

    def _unexpected(self, host: int, eff: Any) -> None:
        raise AssertionError(f"n{host}: no handler for effect {eff!r}")

    def _arm(self, host: int) -> None:
        member = self.members[host]
        deadline = member.next_deadline() if member is not None and self.net.is_up(host) else None
        wanted = NO_DEADLINE if deadline is None else deadline
        if wanted == self._deadlines[host]:
            return
        timer = self._timers[host]
        if timer is not None:
            timer.cancel()
        self._deadlines[host] = wanted
        self._timers[host] = None if deadline is None else self.world.call_at(
            max(deadline, self.world.now), self._timeout, host)

    def _timeout(self, host: int) -> None:
        self._timers[host] = None
        self._deadlines[host] = NO_DEADLINE
        member = self.members[host]
        if member is not None and self.net.is_up(host):
            self.apply(host, member.handle_timeout(self.world.now))

    def _arrival(self, src: int, dst: int, message: list[Any]) -> None:
        member = self.members[dst]
        assert member is not None, "the net delivers only to hosts that are up"
        self.world.trace(f"n{dst}", "rx", src, message[0])
        self.apply(dst, member.received(self.world.now, f"n{src}", message))

    def _lost(self, src: int, dst: int, message: list[Any]) -> None:
        """The runtime gave up on a message to `dst`: the peer is unreachable, and a member that
        takes undelivered messages back (the lookup member) gets it to route again."""
        self._unreachable(src, dst)
        member = self.members[src]
        undelivered = getattr(member, "undelivered", None)
        if undelivered is not None and self.net.is_up(src):
            self.apply(src, undelivered(self.world.now, message))

    def _unreachable(self, host: int, peer: int) -> None:
        member = self.members[host]
        if member is not None and self.net.is_up(host):
            self.world.trace(f"n{host}", "unreachable", peer)
            self.apply(host, member.peer_unreachable(self.world.now, f"n{peer}"))

    def _probe(self, host: int, peer: int) -> None:
        self.counts["probes"] += 1
        state_up = self.net.is_up(peer)
        rtt = self.topology.rtt_ns(host, peer)
        if state_up:
            self.world.call_later(rtt, self._probe_answered, host, peer, rtt)
        elif self.net.state[peer] == SILENT:  # only the probe's own timeout tells
            self.world.call_later(self.probe_timeout_ns, self._unreachable, host, peer)
        else:
            self.world.call_later(rtt, self._unreachable, host, peer)

    def _probe_answered(self, host: int, peer: int, rtt: int) -> None:
        member = self.members[host]
        if member is not None and self.net.is_up(host):
            self.apply(host, member.rtt_measured(self.world.now, f"n{peer}", rtt))

    # ---- hosts coming and going ------------------------------------------------------------------

    def start(self, host: int, bootstrap: int | None) -> None:
        """Start a fresh member on `host`, joining through `bootstrap` (None: the first node)."""
        member = self.make_member(self.refs[host], self.members_rng)
        self.members[host] = member
        self.net.bring_up(host)
        self.joined[host] = 0
        self.world.trace(f"n{host}", "start", "-" if bootstrap is None else bootstrap)
        self.apply(host, member.start(self.world.now, None if bootstrap is None else f"n{bootstrap}"))

    def fail_silently(self, host: int) -> None:
        self.net.fail_silently(host)
        self._arm(host)
        self.world.trace(f"n{host}", "fail-silently")

    def crash(self, host: int) -> None:
        self.net.crash(host)
        self._arm(host)
        self.members[host] = None
        self.joined[host] = 0
        self.world.trace(f"n{host}", "crash")

    def restart(self, host: int, bootstrap: int) -> None:
        assert self.members[host] is None, "only a crashed host restarts"
        self.start(host, bootstrap)

    # ---- the oracle ------------------------------------------------------------------------------

    def live(self) -> list[int]:
        return [h for h in range(self.n) if self.members[h] is not None and self.net.is_up(h)]

    def sorted_live(self) -> tuple[list[int], list[int]]:
        """The live hosts by nodeId, and their nodeIds (for `closest_live`)."""
        hosts = sorted(self.live(), key=lambda h: self.ids[h])
        return hosts, [self.ids[h] for h in hosts]

    def run(self, duration_ns: int) -> None:
        self.world.run(until_ns=self.world.now + duration_ns)


def closest_live(key: int, hosts: Sequence[int], ids: Sequence[int]) -> int:
    """The live host numerically closest to `key` (ties to the smaller id), from the live hosts
    sorted by nodeId and their ids: only the two ring neighbours of the key's place can be closest."""
    p = bisect_left(ids, key)
    below, above = (p - 1) % len(ids), p % len(ids)
    return hosts[below] if closer(key, ids[below], ids[above]) else hosts[above]


def leaf_set_errors(sim: OverlaySim) -> list[int]:
    """The live hosts whose leaf set differs from the brute-force one (the `half` nearest live ids
    on each side), by nodeId order; members must expose `.overlay` (an OverlayNode)."""
    hosts, _ = sim.sorted_live()
    wrong: list[int] = []
    n = len(hosts)
    for p, host in enumerate(hosts):
        leaf_set = sim.members[host].overlay.leaf_set  # type: ignore[union-attr]
        reach = min(leaf_set.half, n - 1)
        smaller = [sim.refs[hosts[(p - k) % n]] for k in range(1, reach + 1)]
        larger = [sim.refs[hosts[(p + k) % n]] for k in range(1, reach + 1)]
        if leaf_set.smaller() != smaller or leaf_set.larger() != larger:
            wrong.append(host)
    return wrong
