"""Pastry's plain data structures against brute force: routing table, leaf set, neighbourhood set."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.overlay.leaf_set import LeafSet
from tidings.core.overlay.neighbourhood import NeighbourhoodSet
from tidings.core.overlay.node_id import (
    BASE,
    DIGITS,
    HALF_RING,
    RING,
    NodeRef,
    digit,
    ring_distance,
    shared_prefix_digits,
)
from tidings.core.overlay.routing_table import RoutingTable

from .overlay_reference import SideModel, closest, larger_side, leaf_members, smaller_side

ME = 0x5A5A_0000_0000_0000_0000_0000_0000_0000

# Ids near ME as well as anywhere: near ones share long prefixes and crowd the leaf set.
near = st.integers(-(1 << 20), 1 << 20).map(lambda d: (ME + d) % RING)
anywhere = st.integers(0, RING - 1)
ids = st.one_of(near, anywhere, st.integers(0, 1 << 12), st.integers(RING - (1 << 12), RING - 1))
rtts = st.one_of(st.none(), st.integers(1, 1000))


def ref(node_id: int) -> NodeRef:
    return NodeRef(node_id, f"n{node_id:x}:1")


# -- routing table -----------------------------------------------------------------------------


@given(st.lists(st.tuples(ids, rtts), max_size=150, unique_by=lambda t: t[0]), st.data())
def test_routing_table_keeps_the_nearest_candidate_of_each_slot(offers, data):
    table = RoutingTable(ME)
    for node_id, rtt in offers:
        table.add(ref(node_id), rtt)
    expected: dict[tuple[int, int], tuple[int, int | None]] = {}
    for node_id, rtt in offers:  # offer order matters only among ties and unknown RTTs
        if node_id == ME:
            continue
        row = shared_prefix_digits(ME, node_id)
        slot = (row, digit(node_id, row))
        held = expected.get(slot)
        if held is None or (rtt is not None and (held[1] is None or rtt < held[1])):
            expected[slot] = (node_id, rtt)
    for row in range(DIGITS):
        for col in range(BASE):
            entry = table.entry(row, col)
            want = expected.get((row, col))
            assert (entry.node_id if entry else None) == (want[0] if want else None)
            assert table.rtt_ns(row, col) == (want[1] if want else None)
    assert len(table) == len(expected) == len(table.nodes()) == sum(table.fill())
    assert table.depth() == (max(r for r, _ in expected) + 1 if expected else 0)

    gone = data.draw(st.lists(st.sampled_from([n for n, _ in offers] or [ME]), max_size=20))
    for node_id in gone:
        table.remove(node_id)
        assert not table.holds(node_id)
    left = {s: v for s, v in expected.items() if v[0] not in gone}
    assert sorted(n.node_id for n in table.nodes()) == sorted(v[0] for v in left.values())

    key = data.draw(ids)
    found = table.lookup(key)
    if key != ME:
        row = shared_prefix_digits(ME, key)
        want = left.get((row, digit(key, row)))
        assert (found.node_id if found else None) == (want[0] if want else None)
        if found is not None:
            assert shared_prefix_digits(found.node_id, key) > shared_prefix_digits(ME, key)


def test_routing_table_rows_and_updates():
    table = RoutingTable(ME)
    a = ref(ME ^ (1 << 127))  # differs in the first digit
    assert table.add(a) and not table.add(a)
    assert table.row(0) == [a] and table.fill()[0] == 1
    assert table.add(a, 50) and table.rtt_ns(*table.slot_of(a.node_id)) == 50
    assert not table.add(a)  # no measurement keeps the old one
    moved = NodeRef(a.node_id, "elsewhere:1")
    assert table.add(moved) and table.entry(*table.slot_of(a.node_id)) == moved
    rival = ref(a.node_id ^ 1)  # same slot
    assert not table.add(rival) and not table.add(rival, 50)
    assert table.add(rival, 49) and table.holds(rival.node_id)
    assert not table.add(ref(ME)) and not table.remove(ME) and not table.remove(a.node_id)
    assert table.lookup(ME) is None


# -- leaf set ------------------------------------------------------------------------------------


@given(st.lists(ids, max_size=60, unique=True), st.sampled_from([2, 4, 8, 16]))
def test_leaf_set_holds_the_true_nearest_of_what_it_was_given(offered, size):
    leaves = LeafSet(ME, size)
    for node_id in offered:
        leaves.add(ref(node_id))
    half = size // 2
    assert [n.node_id for n in leaves.smaller()] == smaller_side(ME, offered, half)
    assert [n.node_id for n in leaves.larger()] == larger_side(ME, offered, half)
    assert [n.node_id for n in leaves.members()] == leaf_members(ME, offered, half)
    assert len(leaves) == len(leaves.members())


@given(st.lists(st.tuples(st.booleans(), ids), max_size=120), st.sampled_from([2, 8, 16]))
def test_leaf_set_follows_the_slow_model_through_adds_and_removes(steps, size):
    leaves = LeafSet(ME, size)
    model = SideModel(ME, size // 2)
    live: list[int] = []
    for is_add, node_id in steps:
        if is_add or not live:
            leaves.add(ref(node_id))
            model.add(node_id)
            live.append(node_id)
        else:
            gone = live.pop(node_id % len(live))
            leaves.remove(gone)
            model.remove(gone)
            live = [i for i in live if i != gone]
        assert [n.node_id for n in leaves.smaller()] == model.smaller
        assert [n.node_id for n in leaves.larger()] == model.larger
    for node_id in live:  # what repair does: offer the survivors again
        leaves.add(ref(node_id))
    assert [n.node_id for n in leaves.members()] == leaf_members(ME, live, size // 2)


@given(st.lists(ids, max_size=40, unique=True), st.lists(ids, min_size=1, max_size=20), st.sampled_from([2, 8, 16]))
def test_a_covered_key_is_closest_to_a_leaf_or_me(offered, keys, size):
    leaves = LeafSet(ME, size)
    for node_id in offered:
        leaves.add(ref(node_id))
    everyone = [*offered, ME]
    for key in keys:
        if leaves.covers(key):
            best = leaves.closest(key)
            assert (ME if best is None else best.node_id) == closest(key, everyone)
    assert leaves.covers(ME)
    for node in leaves.members():
        assert leaves.covers(node.node_id)


@given(st.lists(ids, min_size=1, max_size=40, unique=True))
def test_the_extreme_is_the_farthest_leaf_within_half_the_ring(offered):
    leaves = LeafSet(ME, 16)
    for node_id in offered:
        leaves.add(ref(node_id))
    up = leaves.extreme(larger=True)
    down = leaves.extreme(larger=False)
    proper_up = [n for n in leaves.larger() if (n.node_id - ME) % RING < HALF_RING]
    proper_down = [n for n in leaves.smaller() if (ME - n.node_id) % RING < HALF_RING]
    assert up == (proper_up[-1] if proper_up else None)
    assert down == (proper_down[-1] if proper_down else None)


def test_leaf_set_small_cases():
    leaves = LeafSet(ME, 4)
    assert leaves.covers(123) and leaves.closest(123) is None and leaves.extreme(True) is None
    a = ref(ME + 10)
    assert leaves.add(a) and not leaves.add(a)
    assert leaves.sides_of(a.node_id) == (True, True)  # alone with me: on both sides
    assert leaves.covers(ME + HALF_RING) and leaves.closest(ME + 12) == a
    assert leaves.closest(ME + 12, exclude=a.node_id) is None
    version = leaves.version
    assert leaves.add(NodeRef(a.node_id, "moved:1")) and leaves.version > version
    assert leaves.find("moved:1") is not None and leaves.find(a.address) is None
    assert leaves.remove(a.node_id) and not leaves.remove(a.node_id) and a.node_id not in leaves
    assert not leaves.add(ref(ME))


def test_leaf_set_range_of_a_full_leaf_set():
    leaves = LeafSet(ME, 4)
    for d in (-30, -20, -10, 10, 20, 30):
        leaves.add(ref(ME + d))
    assert [n.node_id - ME for n in leaves.smaller()] == [-10, -20]
    assert [n.node_id - ME for n in leaves.larger()] == [10, 20]
    assert leaves.covers(ME + 20) and leaves.covers(ME - 20) and leaves.covers(ME + 5)
    assert not leaves.covers(ME + 21) and not leaves.covers(ME - 21)
    assert leaves.closest(ME + 16).node_id == ME + 20  # type: ignore[union-attr]
    assert leaves.closest(ME + 15).node_id == ME + 10  # type: ignore[union-attr]  # ties: smaller id


# -- neighbourhood set -----------------------------------------------------------------------------


@settings(max_examples=50)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(1, 10_000)), max_size=80), st.integers(0, 8))
def test_neighbourhood_keeps_the_nearest_by_latest_rtt(offers, size):
    hood = NeighbourhoodSet(size)
    latest: dict[int, int] = {}
    ranked: list[tuple[int, int]] = []
    for node_id, rtt in offers:
        hood.add(ref(node_id), rtt)
        latest[node_id] = rtt
        ranked = sorted([(r, i) for i, r in latest.items() if any(i == k for _, k in ranked) or i == node_id])
        ranked = ranked[:size]
    assert [(r, n.node_id) for n, r in hood.with_rtt()] == ranked
    assert len(hood) == len(ranked)
    for _, node_id in ranked:
        assert node_id in hood and hood.find(ref(node_id).address) is not None
        assert hood.remove(node_id) and node_id not in hood
    assert len(hood) == 0


def test_ring_helpers_agree_with_the_reference():
    assert ring_distance(1, RING - 1) == 2
    assert closest(0, [RING - 1, 1]) == 1
