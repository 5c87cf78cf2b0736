#!/usr/bin/env python3
"""One event's path, and one nack's, through the simulator: the modules each broker's code passes.

  python bench/path_trace.py [--seed 1] [--brokers 16] [--drop-at SHB|RP] [--walks folded|core|all] [--json]

What it runs. An overlay of `--brokers` real broker cores in the deterministic simulator, built by
`tidings.sim.delivery_scenario.DeliveryRun` (its guaranteed-delivery configuration, no faults,
every chunk handed whole to its receiver). It looks for a subscriber's broker (SHB) whose place in
the tree of `nodes/#` is below a forwarder (F): SHB's parent is not the rendez-vous point (RP).
Candidates are tried in broker order, each in a fresh overlay built from the same seed, so the
choice is deterministic; the roles are read from the brokers' status and asserted. The publisher's
broker (PHB) is the first broker that is none of the three. A subscriber to `nodes/#` joins at
the SHB, a publisher (one event per PUBLISH, one every 300 ms) at the PHB. Event 0 warms the path
up (the PHB learns its rendez-vous points); event 1 is traced; event 2's knowledge message from F
to the SHB is dropped (once), so the SHB's curiosity timer nacks it, and the nack and its answer
are traced (F answers from its cache). With `--drop-at RP` the PHB's message to the RP is dropped
instead: the RP nacks, the PHB answers from its log (a log read), and the answer goes down the tree.

How frames are attributed. The simulator runs one action at a time (`World.step`), and in it hands
a broker's core one input at a time through the core's `handle(input)`. The script drives the
steps itself under `sys.setprofile`. A segment starts at the call of `handle` on a broker's core
(recognised by the object, not by a module name): from there until the next such call or the end
of the step, every frame belongs to that broker's handling of that input (its runtime's `apply`
of the effects included); what ran in the step before the first `handle` (the network's delivery,
the runtime's `feed`) is put at the head of that first segment. A step without any `handle` (a
client's action) is one segment of its own. Which segments are on the path is decided by
causality, backwards from the end (inputs and effects recognised by their fields, not their class
names): a `Received` input was caused by the `Send` effect, written on
the same simulated connection by the broker at its other end, whose bytes it holds (the one that
carries the event's payload when there are several); a `WriteSynced` by the `Sync` with its token;
a `LogRead` by the `ReadLog` with its reader; any other input that the runtime handed the same
broker in the same step, right after another (a deferred input), by that other one. The event's
path ends at the SHB's input that sends the event to the subscriber (then the subscriber's client
reading it) and goes back to the PHB's `Received` of the PUBLISH (then the publisher's client
writing it); the nack's path ends at the SHB's input that sends the answered event to the
subscriber and goes back to the `TimerFired` that sent the nack (the SHB's, or the RP's).

What is counted. Every Python frame event of the profiler (`call`, and `return`; a generator's
resumption is a call and its `yield` a return) gives a location: for a call, the file of the
function called; for a return, the file of the frame returned to. Locations are files under
`src/tidings`, written relative to it (for example `core/broker/broker.py`); anything else (the
standard library, msgpack) is skipped. A segment's **walk** is its locations in order with repeats
in a row collapsed: the ordered list of modules it passes through. A **module change** is one step
of a walk (two consecutive locations in different files, counting returns as well as calls:
broker → intake → broker is two); a broker's figure is the sum over its segments on the path.
Three views, each a walk:

- **all**: every file under `src/tidings`, the simulator's runtime included (`sim/`: the network,
  the disk, the broker node's driver, the simulated clients, the world's scheduler: the simulated
  counterparts of aio/server.py, storage/ and client/).
- **core**: only files under `src/tidings/core` (the sans-IO machines, and the client's session
  codec); other locations are skipped, so a runtime call between two core files is one change.
- **folded**: the core view in which a *leaf visit* is folded into its caller: a call into a core
  file whose whole subtree runs in no other core file (a codec, a data structure, a deadline
  helper, a machine's method that needs no other machine) is not a stop. This is the grain of the
  review's "room changes" (`../shared/CORE-REVIEW.md` section 1a, which follows the machines and
  leaves out frames.py, node_id.py, deadlines.py and the like). Its changes are also given for the
  span of the core's `handle` call alone (the review's span, "from Broker.handle to the runtime"),
  the rest being the runtime's part (`apply`, and `next_deadline()` across every machine to arm
  the timer).

The issue's targets are compared with the folded view: at most 12 module changes in the PHB's
`handle` calls, at most 16 distinct files in the folded walks of the whole event path; the other
views are printed beside them for the full cost. Files are discovered as the code runs, so the
script names no module of the project and keeps working when modules move between folders.

Output: a table per path (per broker: inputs, module changes and distinct files in each view; the
whole path's distinct files) and the walk of every segment in one view (`--walks`, folded by
default); `--json` prints one line of counts instead. The same seed gives the same figures (the
test runs it twice, in two processes with different hash seeds).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import tidings
from tidings.core.units import MILLISECOND_NS, SECOND_NS
from tidings.sim.broker_node import BrokerNode
from tidings.sim.clients import Publisher, Subscriber
from tidings.sim.delivery_scenario import MAIN_TREE, DeliveryRun, DeliveryScenario
from tidings.sim.peer_faults import PeerFaults, _frames

SRC = Path(tidings.__file__).resolve().parent  # src/tidings
CORE = "core/"
HANDLE = "handle"  # the core's one entry for an input: Broker.handle(input) -> effects
PATTERN = MAIN_TREE  # the subscription, and so the tree
PUBLISHER = "path-trace-publisher"  # its events' payloads are "<name>:<n>": the markers followed in bytes
INTERVAL_NS = 300 * MILLISECOND_NS  # between events: each one's path is over before the next
EVENTS_MAX = 12  # published at most: the traced one is the first to repeat an earlier one's channel
DEADLINE_NS = 5 * SECOND_NS  # for each phase, in virtual time
STEPS_MAX = 200_000  # for each phase


def marker(n: int) -> bytes:
    return f"{PUBLISHER}:{n}".encode()


# ---- recording -----------------------------------------------------------------------------------


@dataclass
class Segment:
    """One broker's handling of one input (or one step without a broker: a client's action)."""

    index: int
    now: int
    step: int  # the world's step it ran in
    node: str | None  # the broker's name; None for a step in which no core handled anything
    inp: Any = None
    effects: list[Any] = field(default_factory=list)
    received_on: object | None = None  # the simulated connection a Received input came on
    sends: list[tuple[object | None, bytes]] = field(default_factory=list)  # (connection, bytes)
    # (is a call, location) per profiler event: a call's location is the callee's file, a return's
    # the file returned to; None outside src/tidings
    events: list[tuple[bool, str | None]] = field(default_factory=list)
    handle_span: tuple[int, int] = (0, 0)  # the events of the core's handle call, its return included
    label: str = ""  # "publisher" / "subscriber" for the client steps on the path

    @property
    def kind(self) -> str:
        return type(self.inp).__name__ if self.inp is not None else (self.label or "step")


class PathTracer:
    """Drives the world step by step under a profiler and cuts what runs into `Segment`s."""

    def __init__(self, run: DeliveryRun) -> None:
        self.run = run
        self.segments: list[Segment] = []
        self._where: dict[str, str | None] = {}
        self._cores: dict[int, BrokerNode] = {}
        self._current: Segment | None = None
        self._handle_frame: FrameType | None = None
        self._step_segments: list[Segment] = []
        self._steps = 0

    def location(self, filename: str) -> str | None:
        where = self._where.get(filename)
        if where is None and filename not in self._where:
            path = Path(os.path.realpath(filename))
            where = path.relative_to(SRC).as_posix() if path.is_relative_to(SRC) else None
            self._where[filename] = where
        return where

    def step(self) -> list[Segment]:
        """Run one action of the world under the profiler; the segments it made."""
        self._cores = {id(node.core): node for node in self.run.nodes if node.core is not None}
        self._step_segments = []
        self._steps += 1
        self._current = Segment(len(self.segments), self.run.world.now, self._steps, None)
        self._handle_frame = None
        sys.setprofile(self._profile)
        try:
            self.run.world.step()
        finally:
            sys.setprofile(None)
        if not self._step_segments:  # nothing but runtime or client code ran
            self._step_segments.append(self._current)
        self.segments.extend(self._step_segments)
        return self._step_segments

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            if self._handle_frame is None and code.co_name == HANDLE:
                node = self._cores.get(id(frame.f_locals.get("self")))
                if node is not None:
                    self._begin(node, frame)
            assert self._current is not None
            self._current.events.append((True, self.location(code.co_filename)))
        elif event == "return":
            back = frame.f_back
            assert self._current is not None
            self._current.events.append((False, None if back is None else self.location(back.f_code.co_filename)))
            if frame is self._handle_frame:
                self._end(arg)

    def _begin(self, node: BrokerNode, frame: FrameType) -> None:
        inp = frame.f_locals[frame.f_code.co_varnames[1]]
        if self._step_segments:  # a later input in the same step: a segment of its own
            seg = Segment(len(self.segments) + len(self._step_segments), self.run.world.now, self._steps, node.name)
        else:  # the first: what the runtime did to get here is its head
            seg = self._current
            assert seg is not None
            seg.node = node.name
        seg.inp = inp
        if has_bytes(inp):
            seg.received_on = connection(node, inp.conn)
        self._step_segments.append(seg)
        self._current = seg
        self._handle_frame = frame
        seg.handle_span = (len(seg.events), len(seg.events))

    def _end(self, effects: Any) -> None:
        self._handle_frame = None
        seg = self._current
        assert seg is not None and seg.node is not None
        seg.handle_span = (seg.handle_span[0], len(seg.events))
        node = next(n for n in self.run.nodes if n.name == seg.node)
        seg.effects = list(effects or ())
        for eff in seg.effects:
            if has_bytes(eff):
                seg.sends.append((connection(node, eff.conn), bytes(eff.data)))

    def run_until(self, condition: Callable[[], bool], what: str) -> Segment:
        """Step until `condition()` holds; the (one) segment of the step that made it hold."""
        assert not condition(), f"{what} happened before the trace began"
        deadline = self.run.world.now + DEADLINE_NS
        for _ in range(STEPS_MAX):
            upcoming = self.run.world.next_time()
            if upcoming is None or upcoming > deadline:
                break
            made = self.step()
            if condition():
                assert len(made) == 1, f"{what}: {len(made)} segments in one step"
                return made[0]
        raise SystemExit(f"path_trace: {what} did not happen within {DEADLINE_NS} ns")


# ---- causality -----------------------------------------------------------------------------------
# Inputs and effects are recognised by their fields, not by their class names: bytes on a connection
# (Received, Send), a token (Sync -> WriteSynced), a reader (ReadLog -> LogRead).


def has_bytes(obj: object) -> bool:
    return hasattr(obj, "conn") and isinstance(getattr(obj, "data", None), bytes | bytearray | memoryview)


def connection(node: BrokerNode, conn: int) -> object | None:
    """The simulated connection behind a broker's connection number (None if it is gone)."""
    sock = getattr(node, "sockets", {}).get(conn)
    return getattr(sock, "conn", None)


def cause(segments: list[Segment], seg: Segment, mark: bytes | None) -> Segment | None:
    """The earlier segment whose effect `seg`'s input answers, or None (a timer, a client's bytes)."""
    inp = seg.inp
    earlier = segments[: seg.index]
    if has_bytes(inp):
        data = bytes(inp.data)
        found = [s for s in earlier if s.node is not None and s.node != seg.node
                 and any(conn is seg.received_on and (sent in data or data in sent) for conn, sent in s.sends)]
        if mark is not None:
            marked = [s for s in found if any(mark in sent for _, sent in s.sends)]
            found = marked or found
        return found[-1] if found else None
    for field_name in ("token", "reader"):  # a completion: the request with the same token or reader
        if hasattr(inp, field_name):
            value = getattr(inp, field_name)
            return next((s for s in reversed(earlier) if s.node == seg.node and any(
                not has_bytes(e) and getattr(e, field_name, None) == value for e in s.effects)), None)
    before = earlier[-1] if earlier else None  # an input the runtime queued while applying the one before
    if before is not None and before.step == seg.step and before.node == seg.node:
        return before
    return None


def chain_back(segments: list[Segment], last: Segment, mark: bytes | None) -> list[Segment]:
    chain = [last]
    while (before := cause(segments, chain[-1], mark)) is not None:
        chain.append(before)
    return chain[::-1]


def carries(seg: Segment, mark: bytes) -> bool:
    return has_bytes(seg.inp) and mark in bytes(seg.inp.data)


# ---- the cluster ---------------------------------------------------------------------------------


class DropOnce(PeerFaults):
    """A broker's peer faults that drop, once, the frames towards `address` carrying `mark`."""

    def __init__(self, base: PeerFaults, address: str) -> None:
        super().__init__(base.rng)
        self.address = address
        self.mark: bytes | None = None
        self.dropped = 0

    def filter(self, conn: int, data: bytes, address: str | None = None) -> bytes:
        out = super().filter(conn, data, address)
        mark = self.mark
        if mark is None or address != self.address or mark not in out:
            return out
        frames = _frames(out)
        kept = [frame for frame in frames if mark not in frame]
        self.dropped += len(frames) - len(kept)
        self.mark = None
        return b"".join(kept)


def index_of(address: str) -> int:
    return int(address.partition(":")[0][1:])


def tree_chain(run: DeliveryRun, i: int) -> list[int]:
    """Broker i and its ancestors in the tree, up to the root, from the brokers' status."""
    chain = [i]
    while (st := run.tree_status(chain[-1], MAIN_TREE)) and st.get("parent") and len(chain) <= len(run.nodes):
        chain.append(index_of(st["parent"]))
    return chain


@dataclass
class Cluster:
    run: DeliveryRun
    roles: dict[str, int]  # PHB, RP, F, SHB -> broker index
    subscriber: Subscriber
    publisher: Publisher | None = None


def build(seed: int, brokers: int) -> Cluster:
    """The first SHB candidate (in broker order) that has a forwarder between it and the RP."""
    scenario = DeliveryScenario(seed=seed, brokers=brokers, coalesce_probability=1.0)
    for shb in range(1, brokers):
        run = DeliveryRun(scenario)
        rp = run.rendezvous(MAIN_TREE)
        if shb == rp:
            continue
        sub = Subscriber(run.world, run.net, run.nodes[shb].address, "path-trace-subscriber", PATTERN)
        sub.start(run.world.now)
        run.run(SECOND_NS)
        chain = tree_chain(run, shb)
        if len(chain) >= 3 and chain[-1] == rp:
            phb = next(i for i in range(brokers) if i not in chain)
            return Cluster(run, {"PHB": phb, "RP": rp, "F": chain[1], "SHB": shb}, sub)
    raise SystemExit(f"path_trace: no broker of {brokers} has a forwarder between it and the RP (seed {seed})")


# ---- figures -------------------------------------------------------------------------------------


def in_core(where: str | None) -> bool:
    return where is not None and where.startswith(CORE)


def leaves(events: list[tuple[bool, str | None]]) -> set[int]:
    """The calls (event indexes) of core frames whose whole subtree ran in no other core file."""
    out: set[int] = set()
    stack: list[tuple[int, str | None, set[str]]] = []  # (call index, file, core files below)
    for i, (call, where) in enumerate(events):
        if call:
            stack.append((i, where, set()))
            continue
        if not stack:
            continue  # the return of a frame entered before the segment began
        at, mine, below = stack.pop()
        if in_core(mine) and below <= {mine}:
            out.add(at)
        if stack:
            stack[-1][2].update(below)
            if in_core(mine):
                stack[-1][2].add(mine)  # type: ignore[arg-type]
    return out


def walk(events: list[tuple[bool, str | None]], view: str) -> list[str]:
    """The segment's modules in order, repeats in a row collapsed. `view`: "all" (every file under
    src/tidings), "core" (files under core/), "folded" (core/, each leaf visit folded into its caller)."""
    folded = leaves(events) if view == "folded" else set()
    out: list[str] = []
    skipping = 0  # inside a folded leaf: its depth
    for i, (call, where) in enumerate(events):
        if skipping:
            skipping += 1 if call else -1
            continue
        if i in folded:
            skipping = 1
            continue
        if where is None or (view != "all" and not in_core(where)):
            continue
        if not out or out[-1] != where:
            out.append(where)
    return out


def changes(steps: list[str]) -> int:
    return max(len(steps) - 1, 0)


def figures(path: list[Segment], names: dict[str, str]) -> dict[str, Any]:
    """Per broker (in path order) and for the whole path: inputs, module changes, files, walks."""
    stops: list[dict[str, Any]] = []
    for seg in path:
        who = seg.label or seg.node or "?"
        if not stops or stops[-1]["node"] != who:
            stops.append({"role": names.get(who, "hop" if seg.node else who), "node": who, "inputs": [],
                          "changes_all": 0, "changes_core": 0, "changes_folded": 0, "changes_folded_handle": 0,
                          "files_all": set(), "files_core": set(), "files_folded": set(),
                          "walks_all": [], "walks_core": [], "walks_folded": []})
        stop = stops[-1]
        every, core, folded = (walk(seg.events, view) for view in ("all", "core", "folded"))
        begin, end = seg.handle_span
        stop["inputs"].append(seg.kind)
        stop["changes_all"] += changes(every)
        stop["changes_core"] += changes(core)
        stop["changes_folded"] += changes(folded)
        stop["changes_folded_handle"] += changes(walk(seg.events[begin:end], "folded"))
        stop["files_all"].update(every)
        stop["files_core"].update(core)
        stop["files_folded"].update(folded)
        stop["walks_all"].append(every)
        stop["walks_core"].append(core)
        stop["walks_folded"].append(folded)
    out: dict[str, Any] = {"stops": stops}
    for view in ("all", "core", "folded"):
        out[f"files_{view}"] = sorted(set().union(*(stop[f"files_{view}"] for stop in stops)))
        for stop in stops:
            stop[f"files_{view}"] = sorted(stop[f"files_{view}"])
    return out


# ---- the run -------------------------------------------------------------------------------------


DROPS = {"SHB": "F", "RP": "PHB"}  # where the nacked event's knowledge is dropped -> who sends it there


def trace(seed: int = 1, brokers: int = 16, drop_at: str = "SHB") -> dict[str, Any]:
    """Both paths' figures. `drop_at`: the broker that misses the nacked event and nacks it (SHB: F
    answers from its cache; RP: the PHB answers from its log)."""
    cluster = build(seed, brokers)
    run, roles, sub = cluster.run, cluster.roles, cluster.subscriber
    nodes = run.nodes
    names = {nodes[i].name: role for role, i in roles.items()}
    names |= {PUBLISHER: "publisher", sub.name: "subscriber"}
    sender = nodes[roles[DROPS[drop_at]]]
    assert sender.peer_faults is not None
    drop = DropOnce(sender.peer_faults, nodes[roles[drop_at]].address)
    sender.peer_faults = drop
    pub = Publisher(run.world, run.net, nodes[roles["PHB"]].address, PUBLISHER, EVENTS_MAX, hosts=1, batch_max=1,
                    window=1, interval_ns=(INTERVAL_NS, INTERVAL_NS), bad_event_probability=0)
    pub.start(run.world.now)
    got = lambda n: any(marker(n) == f.payload for _, f in sub.received)  # noqa: E731
    run.world.run_until(lambda: got(0), run.world.now + DEADLINE_NS)
    assert got(0), "the first event did not reach the subscriber"

    tracer = PathTracer(run)
    # the event: the first whose channel an earlier event used (its trees' rendez-vous points are
    # known at the PHB, and those of trees without members have said so), from its PUBLISH to the
    # subscriber's reading it
    for n in range(1, EVENTS_MAX - 1):
        published = tracer.run_until(lambda n=n: pub.produced > n, f"event {n}'s publishing")
        channel = pub.sent[marker(n).decode()][0]
        warm = any(pub.sent[marker(m).decode()][0] == channel for m in range(n))
        if warm:
            drop.mark = marker(n + 1)  # the next event's knowledge to `drop_at` is dropped once
        read = tracer.run_until(lambda n=n: got(n), f"event {n}'s delivery")
        if warm:
            break
    else:
        raise SystemExit(f"path_trace: no event of {EVENTS_MAX} repeats an earlier one's channel")
    assert published.node is None and read.node is None, "a client's step ran inside a broker's input"
    published.label, read.label = pub.name, sub.name
    event_path = [published, *_event_path(tracer, roles, nodes, marker(n)), read]
    # the nack: from the timer that sends it to the answer's arrival at the SHB
    tracer.run_until(lambda: got(n + 1), "the nacked event's delivery")
    assert drop.dropped >= 1, f"nothing was dropped towards the {drop_at}"
    nack_path = _nack_path(tracer, nodes[roles[drop_at]].name, nodes[roles["SHB"]].name, marker(n + 1))
    return {
        "seed": seed, "brokers": brokers, "event_number": n, "drop_at": drop_at,
        "roles": {role: nodes[i].name for role, i in roles.items()},
        "event": figures(event_path, names), "nack": figures(nack_path, names),
    }


def delivered_by(tracer: PathTracer, node: str, mark: bytes) -> Segment:
    """The broker's input during which it sent the event's bytes to a client (the subscriber)."""
    return next(s for s in tracer.segments if s.node == node and any(mark in sent for _, sent in s.sends))


def _event_path(tracer: PathTracer, roles: dict[str, int], nodes: list[BrokerNode], mark: bytes) -> list[Segment]:
    path = chain_back(tracer.segments, delivered_by(tracer, nodes[roles["SHB"]].name, mark), mark)
    first = path[0]
    assert first.node == nodes[roles["PHB"]].name and carries(first, mark), \
        f"the event's path goes back to {first.node} {first.kind}, not to the PHB's PUBLISH"
    brokers = [s.node for s in path]
    order = [nodes[roles[r]].name for r in ("PHB", "RP", "F", "SHB")]
    assert [b for b in dict.fromkeys(brokers) if b in order] == order, f"path {brokers}, roles {order}"
    return path


def _nack_path(tracer: PathTracer, nacker: str, shb: str, mark: bytes) -> list[Segment]:
    path = chain_back(tracer.segments, delivered_by(tracer, shb, mark), mark)
    first = path[0]
    assert first.node == nacker and cause(tracer.segments, first, mark) is None and not has_bytes(first.inp), \
        f"the nack's path goes back to {first.node} {first.kind}, not to {nacker}'s timer"
    return path


# ---- output --------------------------------------------------------------------------------------


WALKS = {"all": "every file", "core": "core/ only", "folded": "core/, leaf visits folded"}


def table(result: dict[str, Any], walks: str = "folded") -> str:
    roles = result["roles"]
    lines = [f"path_trace seed={result['seed']} brokers={result['brokers']}: "
             + ", ".join(f"{role} {name}" for role, name in roles.items())
             + f"; the traced event is the publisher's number {result['event_number']}"]
    nack = f"nack and its answer: the {result['drop_at']}'s timer -> ... -> the answer's arrival at the SHB"
    for title, key in (("event: publisher -> PHB -> RP -> F -> SHB -> subscriber", "event"), (nack, "nack")):
        fig = result[key]
        lines += ["", title,
                  "  all = every file under src/tidings, core = files under core/, folded = core/ with leaf "
                  "visits folded (changes: in the core's handle + in the runtime's part)",
                  f"  {'':<34}{'module changes':^26}{'distinct files':^22}",
                  f"  {'role':<11}{'node':<23}{'all':>6}{'core':>6}{'folded':>14}{'all':>8}{'core':>7}{'folded':>7}"
                  "  inputs"]
        for stop in fig["stops"]:
            handle = stop["changes_folded_handle"]
            folded = f"{stop['changes_folded']}" + (f" ({handle}+{stop['changes_folded'] - handle})"
                                                     if stop["node"] in result["roles"].values() else "")
            lines.append(f"  {stop['role']:<11}{stop['node']:<23}{stop['changes_all']:>6}{stop['changes_core']:>6}"
                         f"{folded:>14}{len(stop['files_all']):>8}{len(stop['files_core']):>7}"
                         f"{len(stop['files_folded']):>7}  "
                         f"{', '.join(stop['inputs'])}")
        lines.append(f"  whole path: {len(fig['files_all'])} distinct files under src/tidings, "
                     f"{len(fig['files_core'])} under core/, {len(fig['files_folded'])} in the folded walks")
        lines.append(f"  walks ({WALKS[walks]}), paths under src/tidings:")
        for stop in fig["stops"]:
            for inp, steps in zip(stop["inputs"], stop[f"walks_{walks}"], strict=True):
                lines.append(f"    {stop['role']} {inp}: {' > '.join(steps) or '-'}")
        lines.append("  files in the folded walks: " + ", ".join(fig["files_folded"]))
        lines.append("  other files under core/: " + ", ".join(f for f in fig["files_core"]
                                                          if f not in fig["files_folded"]))
        lines.append("  files outside core/: " + ", ".join(f for f in fig["files_all"] if not f.startswith(CORE)))
    return "\n".join(lines)


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """The one-line JSON: per path, per stop, the counts (no walks)."""
    out: dict[str, Any] = {k: result[k] for k in ("seed", "brokers", "roles", "event_number", "drop_at")}
    for key in ("event", "nack"):
        fig = result[key]
        out[key] = {
            "stops": [{k: (len(v) if k.startswith("files") else v) for k, v in stop.items()
                       if not k.startswith("walks")} for stop in fig["stops"]],
            **{f"files_{view}": len(fig[f"files_{view}"]) for view in ("all", "core", "folded")},
        }
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--brokers", type=int, default=16)
    parser.add_argument("--drop-at", choices=sorted(DROPS), default="SHB",
                        help="who misses the nacked event: SHB (F answers from its cache) or RP (the PHB's log)")
    parser.add_argument("--walks", choices=sorted(WALKS), default="folded", help="which view's walks the table prints")
    parser.add_argument("--json", action="store_true", help="one line of JSON instead of the table")
    args = parser.parse_args(argv)
    result = trace(args.seed, args.brokers, args.drop_at)
    print(json.dumps(summary(result), sort_keys=True) if args.json else table(result, args.walks))


if __name__ == "__main__":
    main()
