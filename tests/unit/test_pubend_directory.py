"""The pubend directory (core/broker/directory.py): merges that commute, gossip that reaches every broker,
nothing forgotten on a crash, and a pubend whose broker is gone staying listed."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.broker.directory import (
    DirectoryConfig,
    DirectoryEntry,
    DirectoryError,
    EntryState,
    PubendDirectory,
    forget_saved,
    merge,
)
from tidings.core.effects import SaveDirectory
from tidings.core.errors import ProtocolError
from tidings.core.inputs import LogState
from tidings.core.overlay.envelope import PeerSend
from tidings.core.overlay.node_id import NodeRef, node_id_from
from tidings.core.wire.types import BrokerType

S = 1_000_000_000  # ns
WALL0 = 1_764_000_000_000_000  # µs: November 2025
CONFIG = DirectoryConfig()

ticks = st.integers(0, 2**40)
entries = st.builds(
    DirectoryEntry, st.just("pA"), st.sampled_from(["h:1", "h:2", "h:3"]), ticks, ticks, st.none() | st.just(0),
    ticks, st.integers(0, 1000), st.integers(0, 50), st.sampled_from(EntryState))


@given(entries, entries, entries)
def test_merge_is_a_join_semilattice(a: DirectoryEntry, b: DirectoryEntry, c: DirectoryEntry) -> None:
    assert merge(a, b) == merge(b, a)
    assert merge(merge(a, b), c) == merge(a, merge(b, c))
    assert merge(a, a) == a
    assert merge(a, b) in (a, b)


class Log:
    """A pubend's log as its broker reports it to the directory."""

    def __init__(self) -> None:
        self.tail = WALL0
        self.state = LogState()

    def publish(self, tick: int) -> None:
        first = self.state.first_tick if self.state.first_tick is not None else tick
        self.state = replace(self.state, last_tick=tick, first_tick=first, record_count=self.state.record_count + 1)
        self.tail = max(self.tail, tick)

    def __call__(self) -> tuple[int, LogState]:
        return self.tail, self.state


def node(i: int) -> NodeRef:
    return NodeRef(node_id_from(f"p{i:016x}"), f"127.0.0.1:{7000 + i}")


def timeout(d: PubendDirectory, now: int, wall_us: int) -> list[Any]:
    """The directory's timer at `now`, its broker's wall clock at `wall_us` (an input of its own)."""
    d.wall_clock(wall_us)
    return d.handle_timeout(now)


def hear(d: PubendDirectory, now: int, sender: str, message: list[Any], wall_us: int) -> list[Any]:
    d.wall_clock(wall_us)
    return d.received(now, sender, message)


def forget(d: PubendDirectory, now: int, wall_us: int, pubend: str) -> list[Any]:
    d.wall_clock(wall_us)
    return d.forget(now, pubend)


def machine(i: int, saved: bytes | None = None, log: Log | None = None,
            config: DirectoryConfig = CONFIG) -> tuple[PubendDirectory, Log]:
    log = log or Log()
    return PubendDirectory(node(i), f"p{i:016x}", config, log, saved), log


class Ring:
    """Directories on a ring, each with its `leaf` nearest neighbours on both sides as its leaf set;
    their messages delivered in rounds (a broker that is down neither sends nor receives)."""

    def __init__(self, n: int, leaf: int = 1, config: DirectoryConfig = CONFIG) -> None:
        self.n, self.leaf, self.config = n, leaf, config
        self.logs = [Log() for _ in range(n)]
        self.dirs = [machine(i, log=self.logs[i], config=config)[0] for i in range(n)]
        self.down: set[int] = set()
        self.saved: dict[int, bytes] = {}
        self.now, self.wall = 0, WALL0
        self.by_address = {node(i).address: i for i in range(n)}
        self.inbox: list[tuple[int, str, list[Any]]] = []
        for i, d in enumerate(self.dirs):
            d.start(0)
            self.leaf_set(i)

    def leaf_set(self, i: int) -> None:
        members = sorted({(i + k) % self.n for k in range(-self.leaf, self.leaf + 1)} - {i} - self.down)
        self.take(i, self.dirs[i].leaf_set_changed(self.now, [node(j) for j in members]))

    def take(self, i: int, effects: list[Any]) -> None:
        for eff in effects:
            if isinstance(eff, PeerSend):
                self.inbox.append((self.by_address[eff.address], node(i).address, eff.message))
            elif isinstance(eff, SaveDirectory):
                self.saved[i] = eff.data

    def round(self) -> None:
        self.now += self.config.announce_interval_ns
        self.wall += self.config.announce_interval_ns // 1000
        for i, d in enumerate(self.dirs):
            self.logs[i].tail = self.wall
            if i not in self.down:
                self.take(i, timeout(d, self.now, self.wall))
        inbox, self.inbox = self.inbox, []
        for to, sender, message in inbox:
            if to not in self.down and self.by_address[sender] not in self.down:
                self.take(to, hear(self.dirs[to], self.now, sender, message, self.wall))

    def crash(self, i: int) -> None:
        self.down.add(i)
        for j in range(self.n):
            if j not in self.down:
                self.leaf_set(j)

    def restart(self, i: int) -> None:
        self.dirs[i] = machine(i, self.saved.get(i), self.logs[i], self.config)[0]
        self.dirs[i].start(self.now)
        self.down.discard(i)
        for j in range(self.n):
            if j not in self.down:
                self.leaf_set(j)

    def listed(self, i: int) -> list[str]:
        return [e.pubend for e in self.dirs[i].entries()]


def test_gossip_along_the_leaf_sets_reaches_every_broker() -> None:
    ring = Ring(12, leaf=1)
    for _ in range(8):
        ring.round()
    everyone = sorted(f"p{i:016x}" for i in range(12))
    assert all(ring.listed(i) == everyone for i in range(12))


def test_a_pubend_whose_broker_is_gone_stays_listed_with_its_last_known_log() -> None:
    ring = Ring(5, leaf=2)
    ring.logs[3].publish(WALL0 + 10)
    for _ in range(4):
        ring.round()
    ring.crash(3)
    for _ in range(3600):  # an hour of rounds after the crash
        ring.round()
    gone = f"p{3:016x}"
    for i in (0, 1, 2, 4):
        entry = ring.dirs[i].get(gone)
        assert entry is not None and entry.listed
        assert (entry.address, entry.last_event_tick, entry.first_tick, entry.records) == (
            node(3).address, WALL0 + 10, WALL0 + 10, 1)


def test_an_entry_not_reissued_for_entry_age_ns_max_ages_out() -> None:
    config = DirectoryConfig(entry_age_ns_max=30 * S, refresh_interval_ns=10 * S, sync_interval_ns=5 * S)
    ring = Ring(4, leaf=2, config=config)
    for _ in range(3):
        ring.round()
    ring.crash(2)
    for _ in range(20):
        ring.round()
    assert f"p{2:016x}" in ring.listed(0)
    for _ in range(20):
        ring.round()
    assert all(f"p{2:016x}" not in ring.listed(i) for i in (0, 1, 3))
    assert ring.dirs[0].aged_out == 1
    for _ in range(10):  # the anti-entropy of the others does not bring it back
        ring.round()
    assert all(f"p{2:016x}" not in ring.listed(i) for i in (0, 1, 3))


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 4), st.integers(1, 6), st.integers(0, 6))
def test_nothing_is_forgotten_on_a_crash_and_restart(victim: int, before: int, after: int) -> None:
    ring = Ring(5, leaf=1)
    for i in range(5):
        ring.logs[i].publish(WALL0 + i + 1)
    for _ in range(before + 4):
        ring.round()
    held = {e.pubend: e for e in ring.dirs[victim].entries()}
    own = held[f"p{victim:016x}"]
    ring.crash(victim)
    for _ in range(after):
        ring.round()
    ring.dirs[victim] = machine(victim, ring.saved[victim], ring.logs[victim])[0]  # before it hears anyone
    again = {e.pubend: e for e in ring.dirs[victim].entries()}
    assert again == held
    ring.restart(victim)
    ring.round()
    assert ring.dirs[victim].get(own.pubend).version > own.version  # type: ignore[union-attr]
    assert ring.listed(victim) == sorted(held)


@settings(max_examples=50, deadline=None)
@given(st.lists(entries.flatmap(lambda e: st.sampled_from(["pA", "pB", "pC"]).map(lambda p: replace(e, pubend=p))),
                max_size=12), st.randoms(use_true_random=False))
def test_brokers_that_heard_the_same_entries_in_any_order_agree(heard: list[DirectoryEntry], rng: Any) -> None:
    a, _ = machine(1)
    b, _ = machine(2)
    shuffled = list(heard)
    rng.shuffle(shuffled)
    for d, order in ((a, heard), (b, shuffled)):
        for e in order:
            hear(d, 0, "127.0.0.1:9", [BrokerType.DIRECTORY, [e.to_wire()]], 50)
    for p in ("pA", "pB", "pC"):
        assert a.get(p) == b.get(p)


def test_forget_removes_a_decommissioned_pubend_everywhere_but_not_a_live_one() -> None:
    ring = Ring(4, leaf=2)
    for _ in range(3):
        ring.round()
    ring.crash(1)
    ring.take(0, forget(ring.dirs[0], ring.now, ring.wall, f"p{1:016x}"))
    ring.round()
    ring.round()
    assert all(f"p{1:016x}" not in ring.listed(i) for i in (0, 2, 3))
    assert ring.dirs[2].status()["directory_forgotten"] == 1
    # a live broker's pubend comes back: its broker re-issues its entry above the tombstone
    ring.take(0, forget(ring.dirs[0], ring.now, ring.wall, f"p{3:016x}"))
    for _ in range(3):
        ring.round()
    assert all(f"p{3:016x}" in ring.listed(i) for i in (0, 2, 3))
    with pytest.raises(DirectoryError, match="own"):
        forget(ring.dirs[0], ring.now, ring.wall, f"p{0:016x}")
    with pytest.raises(DirectoryError, match="not in the directory"):
        forget(ring.dirs[0], ring.now, ring.wall, "pnope")


@pytest.mark.parametrize("message", [
    [BrokerType.DIRECTORY], [BrokerType.DIRECTORY, "x"], [BrokerType.DIRECTORY, [["pA"]]],
    [BrokerType.DIRECTORY, [["pA", "h:1", -1, 0, None, 0, 0, 1, False]]],
    [BrokerType.DIRECTORY, [["pA", "h:1", 5, 3, 4, 0, 0, 1, "no"]]],
    [BrokerType.DIRECTORY, [["", "h:1", 5, 3, None, 0, 0, 1, False]]],
    [BrokerType.DIRECTORY, [["pA", "h:1", 5, 3, 4, 0, 0, 1, False]]],  # first tick after the last
    [BrokerType.DIRECTORY, [["pA", "h" * 400, 5, 3, None, 0, 0, 1, False]]],
    [BrokerType.DIRECTORY, [["pA", "h:1", 5, 3, None, 0, 0, 1, False]] * (CONFIG.message_entries_max + 1)],
])
def test_a_malformed_message_is_refused_and_changes_nothing(message: list[Any]) -> None:
    d, _ = machine(1)
    with pytest.raises(ProtocolError):
        hear(d, 0, "127.0.0.1:9", message, WALL0)
    assert d.entries() == [] and d.rejected == 1


def test_the_directory_is_bounded() -> None:
    d, _ = machine(1, config=DirectoryConfig(entries_max=3))
    wire = [DirectoryEntry(f"p{i}", f"h:{i}", 10, 5, 1, 0, 1, WALL0).to_wire() for i in range(5)]
    hear(d, 0, "127.0.0.1:9", [BrokerType.DIRECTORY, wire], WALL0)
    assert [e.pubend for e in d.entries()] == ["p0", "p1", "p2"] and d.refused == 2
    newer = replace(DirectoryEntry.from_wire(wire[0]), version=WALL0 + 1).to_wire()
    hear(d, 0, "127.0.0.1:9", [BrokerType.DIRECTORY, [newer]], WALL0)
    assert d.get("p0").version == WALL0 + 1  # type: ignore[union-attr]


def test_own_entry_is_reissued_on_a_change_and_otherwise_only_each_refresh_interval() -> None:
    d, log = machine(1, config=DirectoryConfig(refresh_interval_ns=60 * S, sync_interval_ns=1000 * S))
    d.start(0)
    d.leaf_set_changed(0, [node(2)])
    first = timeout(d, 0, WALL0)
    assert [type(e) for e in first] == [PeerSend, SaveDirectory]
    quiet = [timeout(d, k * S, WALL0 + k * 1_000_000) for k in range(1, 30)]
    assert all(not any(isinstance(e, PeerSend) for e in effects) for effects in quiet)
    log.publish(WALL0 + 31_000_000)
    sent = [e for e in timeout(d, 31 * S, WALL0 + 31_000_000) if isinstance(e, PeerSend)]
    assert len(sent) == 1 and sent[0].message[1][0][3] == WALL0 + 31_000_000
    assert not any(isinstance(e, PeerSend) for e in timeout(d, 80 * S, WALL0 + 80_000_000))
    later = [e for e in timeout(d, 92 * S, WALL0 + 92_000_000) if isinstance(e, PeerSend)]
    assert len(later) == 1 and later[0].message[1][0][7] == WALL0 + 92_000_000  # refresh_interval_ns passed


def test_forgetting_through_a_stopped_brokers_saved_directory() -> None:
    ring = Ring(3, leaf=1)
    for _ in range(3):
        ring.round()
    retired = f"p{2:016x}"
    ring.crash(2)
    ring.crash(1)  # stopped by the operator, who forgets the retired pubend in its saved directory
    ring.saved[1] = forget_saved(ring.saved[1], retired, f"p{1:016x}", ring.wall)
    with pytest.raises(DirectoryError, match="own"):
        forget_saved(ring.saved[1], f"p{1:016x}", f"p{1:016x}", ring.wall)
    with pytest.raises(DirectoryError, match="not in the directory"):
        forget_saved(ring.saved[1], retired, f"p{1:016x}", ring.wall)  # already forgotten
    ring.restart(1)
    for _ in range(2):
        ring.round()
    assert ring.listed(0) == ring.listed(1) == [f"p{0:016x}", f"p{1:016x}"]
