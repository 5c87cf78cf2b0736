"""Scribe trees over the ideal overlay of scribe_harness: build, multicast, repair, prune."""

import json
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.auth.rules import Rule
from tidings.core.channels import pattern_matches
from tidings.core.multicast.agent import ScribeConfig
from tidings.core.multicast.effects import ChildAdded, EventForwarded, ParentSuspected
from tidings.core.multicast.trees import publish_trees, subscription_tree, tree_key
from tidings.core.overlay.node_id import closer
from tidings.core.wire.types import ScribeType

from .scribe_harness import SECOND, Network, node

TREE = "sensors/#"
KEY = tree_key(TREE)


def members(net: Network, count: int, step: int = 3) -> list[str]:
    """`count` subscriber addresses spread over the ring, never the tree's root."""
    root = net.root_of(KEY).address
    chosen = [a for a in list(net.alive)[::step] if a != root][:count]
    for address in chosen:
        net.subscribe(address, TREE)
    return chosen


def forwarders(net: Network) -> list[str]:
    return [a for a, s in net.tree_status(TREE).items() if s["children"] and "root" not in s["role"]]


def assert_exactly_once(net: Network, subscribers: list[str], events: list[list]) -> None:
    got = net.received(TREE)
    assert set(got) == set(subscribers)
    for address in subscribers:
        assert sorted(got[address]) == sorted(events), address


def assert_connected(net: Network) -> None:
    """Every tree node reaches the root through parents, and each parent lists it as a child."""
    status = net.tree_status(TREE)
    root = net.root_of(KEY).address
    assert "root" in status[root]["role"]
    for start in status:
        at, seen = start, {start}
        while at != root:
            parent = status[at]["parent"]
            assert parent in status and at in status[parent]["children"], (at, parent)
            assert parent not in seen
            seen.add(parent)
            at = parent


def test_every_subscriber_receives_every_event_exactly_once():
    net = Network(64)
    subs = members(net, 16)
    assert_connected(net)
    assert forwarders(net), "the ideal overlay should make some routes share forwarders"
    events = [["e", i] for i in range(5)]
    for i, event in enumerate(events):
        net.publish(f"n{i * 7}:7000", TREE, event)
    assert_exactly_once(net, subs, events)
    net.advance(20 * SECOND)  # heartbeats and refreshes alone change nothing
    assert_connected(net)
    assert_exactly_once(net, subs, events)


def test_the_root_delivers_to_itself_when_it_is_a_member():
    net = Network(16)
    root = net.root_of(KEY).address
    net.subscribe(root, TREE)
    subs = [root, *members(net, 3)]
    net.publish("n1:7000", TREE, ["x"])
    assert_exactly_once(net, subs, [["x"]])
    assert net.tree_status(TREE)[root]["role"] == "root+member"


def test_an_empty_tree_stops_publishes_until_a_member_joins():
    net = Network(32)
    publisher = next(a for a in net.alive if a != net.root_of(KEY).address)
    net.publish(publisher, TREE, ["lost"])
    agent = net.agents[publisher]
    assert agent.publish(net.now, TREE, ["suppressed"]) == []
    sub = members(net, 1)
    assert agent.publish(net.now, TREE, ["x"]) != [], "TREE_ACTIVE lifted the suppression"
    net.publish(publisher, TREE, ["x"])
    assert_exactly_once(net, sub, [["x"]])


def test_an_empty_tree_hold_expires_without_tree_active():
    net = Network(8, ScribeConfig(empty_hold_ns=5 * SECOND))
    publisher = next(a for a in net.alive if a != net.root_of(KEY).address)
    net.publish(publisher, TREE, ["lost"])
    net.advance(4 * SECOND)
    assert net.agents[publisher].publish(net.now, TREE, ["x"]) == []
    net.advance(1 * SECOND)
    assert net.agents[publisher].publish(net.now, TREE, ["x"]) != []


def test_the_root_itself_can_be_told_its_own_tree_is_empty():
    net = Network(8)
    root = net.root_of(KEY).address
    net.publish(root, TREE, ["lost"])
    assert net.agents[root].publish(net.now, TREE, ["x"]) == []
    net.subscribe(root, TREE)
    net.publish(root, TREE, ["x"])
    assert net.received(TREE) == {root: [["x"]]}


def test_a_silent_forwarder_failure_is_repaired_after_the_parent_timeout():
    net = Network(64)
    subs = members(net, 20, step=2)
    victim = next(a for a in forwarders(net) if a not in subs)
    orphans = net.tree_status(TREE)[victim]["children"]
    net.kill(victim)
    net.advance(net.config.parent_timeout_ns + net.config.heartbeat_interval_ns)
    suspected = {at for at, upcall in net.upcalls_of(ParentSuspected) if upcall.tree == TREE}
    assert set(orphans) <= suspected
    assert victim not in net.tree_status(TREE)
    assert_connected(net)
    net.publish("n5:7000", TREE, ["after"])
    assert_exactly_once(net, subs, [["after"]])


def test_a_reported_failure_repairs_at_once():
    net = Network(64)
    subs = members(net, 20, step=2)
    victim = next(a for a in forwarders(net) if a not in subs)
    net.kill(victim)
    net.report_failure(victim)
    assert_connected(net)
    net.publish("n5:7000", TREE, ["after"])
    assert_exactly_once(net, subs, [["after"]])


def test_root_failure_moves_the_tree_and_its_metadata_to_the_next_closest_node():
    net = Network(48)
    creator = "n3:7000"
    net.do(creator, lambda agent, now: agent.create(now, TREE, "alice", (Rule("alice", "subscribe", True, "#"),)))
    old_root = net.root_of(KEY).address
    assert net.tree_status(TREE)[old_root]["creator"] == "alice"
    subs = members(net, 12)
    net.kill(old_root)
    net.update_leaf_sets()
    net.advance(net.config.parent_timeout_ns + net.config.heartbeat_interval_ns)
    new_root = net.root_of(KEY).address
    status = net.tree_status(TREE)
    assert new_root != old_root and "root" in status[new_root]["role"]
    assert status[new_root]["creator"] == "alice", "taken from the replica"
    assert_connected(net)
    net.publish("n5:7000", TREE, ["after"])
    assert_exactly_once(net, subs, [["after"]])


def test_a_closer_node_joining_takes_the_tree_over():
    net = Network(32)
    net.do("n0:7000", lambda agent, now: agent.create(now, TREE, "alice"))
    subs = members(net, 8)
    old_root = net.root_of(KEY).address
    root_id = net.alive[old_root].node_id
    newcomer = next(node(f"x{i}") for i in range(10_000) if closer(KEY, node(f"x{i}").node_id, root_id))
    net.add(newcomer)
    assert net.root_of(KEY) == newcomer
    status = net.tree_status(TREE)
    assert "root" in status[newcomer.address]["role"] and status[newcomer.address]["creator"] == "alice"
    assert status[old_root]["parent"] == newcomer.address
    assert_connected(net)
    net.publish("n5:7000", TREE, ["after"])
    assert_exactly_once(net, subs, [["after"]])


def test_unsubscribing_everyone_prunes_the_tree_to_nothing():
    net = Network(64)
    subs = members(net, 16)
    for address in subs[:8]:
        net.unsubscribe(address, TREE)
    assert_connected(net)
    net.publish("n1:7000", TREE, ["half"])
    assert_exactly_once(net, subs[8:], [["half"]])
    for address in subs[8:]:
        net.unsubscribe(address, TREE)
    assert net.tree_status(TREE) == {}


def test_a_child_that_stops_refreshing_expires():
    net = Network(32)
    subs = members(net, 6)
    leaf = next(a for a in subs if not net.tree_status(TREE)[a]["children"])
    parent = net.tree_status(TREE)[leaf]["parent"]
    net.kill(leaf)
    net.advance(net.config.child_timeout_ns - 2 * SECOND)
    assert leaf in net.tree_status(TREE)[parent]["children"], "heartbeats alone do not drop a child"
    net.advance(net.config.heartbeat_interval_ns + 2 * SECOND)
    assert leaf not in net.tree_status(TREE).get(parent, {"children": []})["children"]


def test_upcalls_carry_the_subscribe_extra_and_the_repair_can_be_extended():
    net = Network(64)
    subs = members(net, 20, step=2)
    newcomer = next(a for a in net.alive if a not in net.tree_status(TREE))
    net.subscribe(newcomer, TREE, extra={"from": 41})
    assert [c.subscribe_extra for _, c in net.upcalls_of(ChildAdded) if c.child.address == newcomer] == [{"from": 41}]
    net.publish("n2:7000", TREE, ["x"])
    forwarded = net.upcalls_of(EventForwarded)
    assert forwarded and all(f.event == ["x"] for _, f in forwarded)
    assert sum(len(f.children) for _, f in forwarded) == len(net.tree_status(TREE)) - 1

    net.repair_extra = lambda upcall: {"repairing": upcall.tree}
    victim = next(a for a in forwarders(net) if a not in subs)
    net.kill(victim)
    net.advance(net.config.parent_timeout_ns + net.config.heartbeat_interval_ns)
    extras = [c.subscribe_extra for _, c in net.upcalls_of(ChildAdded)]
    assert {"repairing": TREE} in extras


def test_status_is_json_and_names_roles():
    net = Network(64)
    members(net, 16)
    roles = set()
    for address in net.alive:
        status = net.agents[address].status()
        json.dumps(status)
        roles.update(entry["role"] for entry in status)
    assert {"root", "member"} <= roles
    assert any("forwarder" in role for role in roles)


def test_same_inputs_give_the_same_trace():
    def play() -> list:
        net = Network(40)
        subs = members(net, 10)
        net.publish("n3:7000", TREE, ["a"])
        net.kill(next(a for a in forwarders(net) if a not in subs))
        net.advance(10 * SECOND)
        net.publish("n3:7000", TREE, ["b"])
        return net.trace

    assert play() == play()


OPS = st.lists(st.one_of(
    st.tuples(st.sampled_from(["subscribe", "unsubscribe", "publish", "crash", "report", "join"]), st.integers(0, 99)),
    st.tuples(st.just("advance"), st.integers(0, 5 * SECOND)),
), max_size=25)


@settings(max_examples=int(os.environ.get("SCRIBE_EXAMPLES", "60")))
@given(OPS)
def test_after_any_churn_the_tree_heals_and_delivers_exactly_once(ops):
    net = Network(24)
    subs: set[str] = set()
    for step, (op, n) in enumerate(ops):
        live = list(net.alive)
        address = live[n % len(live)]
        if op == "subscribe":
            net.subscribe(address, TREE)
            subs.add(address)
        elif op == "unsubscribe":
            net.unsubscribe(address, TREE)
            subs.discard(address)
        elif op in ("crash", "report") and len(live) > 8:
            net.kill(address)
            subs.discard(address)
            net.update_leaf_sets()
            if op == "report":
                net.report_failure(address)
        elif op == "publish":
            net.publish(address, TREE, ["during", step])
        elif op == "join":  # a new node, or a restart that lost all soft state
            net.add(node(f"j{n % 50}"))
            subs.discard(node(f"j{n % 50}").address)
        else:
            net.advance(n)
    config = net.config
    net.advance(max(config.parent_timeout_ns, config.empty_hold_ns) + 2 * config.heartbeat_interval_ns)
    if subs:
        assert_connected(net)
    net.publish(next(iter(net.alive)), TREE, ["final"])
    for events in net.received(TREE).values():
        assert len(events) == len({repr(e) for e in events}), "a node received an event twice"
    got = {a: [e for e in events if e == ["final"]] for a, events in net.received(TREE).items()}
    assert {a: e for a, e in got.items() if e} == {a: [["final"]] for a in subs}


def test_channels_reach_every_matching_pattern_once_through_the_tree_mapping():
    net = Network(48)
    patterns = ["a/b/c", "a/+/c", "a/#", "#", "x/#", "a/b/#", "+/y", "a/b/c/#"]
    subscribers = {}
    for i, pattern in enumerate(patterns):
        for address in list(net.alive)[i :: 9][:3]:
            subscribers.setdefault(address, []).append(pattern)
            net.subscribe(address, subscription_tree(pattern))
    channels = ["a/b/c", "a/x/c", "x/y", "a", "a/b/c/d", "q"]
    for i, channel in enumerate(channels):
        for tree in publish_trees(channel):
            net.publish(f"n{i}:7000", tree, [channel, i])
    for address, subscribed in subscribers.items():
        delivered = net.delivered[address]
        assert len(delivered) == len({repr(item) for item in delivered}), "once per tree"
        for pattern in subscribed:
            expected = [[c, i] for i, c in enumerate(channels) if pattern_matches(pattern, c)]
            in_tree = [e for t, e in delivered if t == subscription_tree(pattern)]
            assert [e for e in in_tree if pattern_matches(pattern, e[0])] == expected, (address, pattern)


def test_one_heartbeat_message_per_child_carries_all_shared_trees():
    net = Network(16)
    child = "n3:7000"
    trees = [f"t{i}" for i in range(40)]
    for tree in trees:
        net.subscribe(child, tree)
    net.trace.clear()
    net.advance(2 * SECOND)
    beats = [item for _, kind, to, item in net.trace
             if kind == "direct" and to == child and item[1][0] == ScribeType.HEARTBEAT]
    parents = {net.tree_status(t)[child]["parent"] for t in trees}
    assert len(beats) <= 2 * len(parents)
    assert sum(len(item[1][1]) for item in beats) == 2 * len(trees)
