"""Filter summaries on forwarders, driving the reliability machines directly (a stand-in for Scribe).

A forwarder sends each child only the D ticks its summary matches, F for the rest; a widening
(a new local subscription, a child's wider summary) loses nothing that was silenced upstream or
is in flight as silence; summaries merge without ever dropping a match.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.channels import pattern_matches
from tidings.core.config import BrokerConfig
from tidings.core.event import TICK_MAX
from tidings.core.filters import parse_filter
from tidings.core.inputs import LogState
from tidings.core.multicast.effects import TreeShape
from tidings.core.overlay.envelope import PeerSend
from tidings.core.overlay.node_id import NodeRef
from tidings.core.reliability import messages
from tidings.core.reliability.effects import SendToChild
from tidings.core.reliability.node import DeliverRecords, ReliabilityNode
from tidings.core.reliability.summary import EVERYTHING, Summary, covers, merge
from tidings.core.wire.types import ReliabilityType

TREE = "nodes/#"
PUBEND = "p-far"


class Scribe:
    """A stand-in for Scribe: the tree's shape, told to the reliability node whenever a test changes
    it (as the cluster member hands it Scribe's `TreeShape`s); what the node asks of Scribe comes
    back as effects (SendToChild, RememberPublisher)."""

    def __init__(self, gd: ReliabilityNode, parent: str | None, children: list[str]) -> None:
        self.gd = gd
        self._parent = parent
        self._kids = list(children)
        self._on_tree = True  # False: Scribe pruned the tree here
        self.tell()

    def tell(self) -> None:
        self.gd.tree_changed(TreeShape(TREE, self._on_tree, self._parent is None, self._parent, tuple(self._kids))
                             if self._on_tree else TreeShape(TREE))

    @property
    def parent(self) -> str | None:
        return self._parent

    @parent.setter
    def parent(self, value: str | None) -> None:
        self._parent = value
        self.tell()

    @property
    def kids(self) -> list[str]:
        return list(self._kids)

    @kids.setter
    def kids(self, value: list[str]) -> None:
        self._kids = list(value)
        self.tell()

    @property
    def on_tree(self) -> bool:
        return self._on_tree

    @on_tree.setter
    def on_tree(self, value: bool) -> None:
        self._on_tree = value
        self.tell()


def node(address: str, parent: str | None, children: list[str],
         congested: Callable[[str], bool] = lambda address: False,
         config: BrokerConfig | None = None,
         takes_complete: Callable[[str], bool] = lambda address: True) -> tuple[ReliabilityNode, Scribe]:
    gd = ReliabilityNode(NodeRef(1, address), f"p-{address}", (config or BrokerConfig()).reliability_config(),
                         lambda now, tree: False, lambda channel: [TREE], lambda: (0, LogState()),
                         congested=congested, takes_complete=takes_complete)
    return gd, Scribe(gd, parent, children)


def record(tick: int, channel: str, **attributes: Any) -> bytes:
    return msgpack.packb([PUBEND, tick, channel, attributes, "s", "i", f"e{tick}".encode()])


def knowledge(after: int, through: int, data: dict[int, bytes], epoch: int | None) -> list[Any]:
    ticks = tuple(sorted(data))
    return ["origin", messages.KnowledgeMessage(TREE, PUBEND, after, through, ticks, tuple(data[t] for t in ticks),
                                         False, epoch).to_wire()]


def sent_to(effects: list[Any], child: str) -> list[messages.KnowledgeMessage]:
    return [messages.decode(e.event[1]) for e in effects if type(e) is SendToChild and e.child == child]


def peer_messages(effects: list[Any], code: int, kind: type) -> list[Any]:
    """The messages of type `code` (decoded, each a `kind`) among `effects`' PeerSends."""
    out = []
    for e in effects:
        if type(e) is PeerSend and e.message[0] == code:
            decoded = messages.decode(e.message)
            assert type(decoded) is kind
            out.append(decoded)
    return out


def summaries(effects: list[Any]) -> list[messages.SummaryUpdate]:
    return peer_messages(effects, ReliabilityType.SUMMARY, messages.SummaryUpdate)


def delivered(effects: list[Any], key: int) -> list[int]:
    return [msgpack.unpackb(r)[1] for e in effects if type(e) is DeliverRecords and key in e.keys for r in e.records]


def extra(epoch: int, *entries: tuple[str, str]) -> list[Any]:
    return [0, [], [epoch, [list(e) for e in entries]]]


EVENTS = {3: record(3, "nodes/a/load", load=1), 5: record(5, "nodes/b/load", x=2),
          7: record(7, "nodes/b/load", x=0), 9: record(9, "other/c", x=5)}


def test_each_child_gets_only_the_data_its_summary_matches_and_silence_for_the_rest():
    gd, _ = node("f", "parent", ["a", "b", "c"])
    gd.child_added(0, TREE, "a", extra(1, ("nodes/a/#", "")))
    gd.child_added(0, TREE, "b", extra(4, ("nodes/b/+", "x > 1")))
    gd.child_added(0, TREE, "c", [0, []])  # an old peer: no summary, everything, unstamped
    stamp = gd.interest(TREE).epoch
    out = gd.event_arrived(1, TREE, knowledge(0, 10, EVENTS, stamp), "parent")
    for child, ticks, epoch in (("a", [3], 1), ("b", [5], 4), ("c", [3, 5, 7, 9], None)):
        got = sent_to(out, child)
        assert [t for k in got for t in k.ticks] == ticks
        assert got[0].after == 0 and got[-1].through == 10  # every tick is known to the child
        assert {k.epoch for k in got} == {epoch}
    # the forwarder's own interest went up: the union, which covers each child's
    up = gd.interest(TREE).sent
    assert up is EVERYTHING  # c takes everything


def test_a_widening_local_subscription_loses_nothing_silenced_upstream_or_in_flight():
    gd, _ = node("f", "parent", [])
    gd.local_subscribe(0, 1, TREE, 0, pattern="nodes/a/#")
    first = gd.interest(TREE).epoch
    a3, b6, b12, a15 = (record(3, "nodes/a/x"), record(6, "nodes/b/x"), record(12, "nodes/b/x"),
                        record(15, "nodes/a/x"))
    # the parent filters by nodes/a/#: the nodes/b event at 6 came as silence
    out = gd.event_arrived(1, TREE, knowledge(0, 10, {3: a3}, first), "parent")
    assert delivered(out, 1) == [3]
    # a subscription to nodes/b/# from tick 4: the F ticks after 4 are in doubt again
    out = gd.local_subscribe(2, 2, TREE, 4, pattern="nodes/b/#")
    [update] = summaries(out)
    assert update.epoch > first and update.since <= 4
    assert covers(update.summary, Summary(frozenset({("nodes/b/#", "")})))
    assert delivered(out, 2) == []
    # in flight before the parent heard: filtered by the old summary (the nodes/b event at 12 silenced)
    out = gd.event_arrived(3, TREE, knowledge(10, 20, {15: a15}, first), "parent")
    assert delivered(out, 2) == []  # its silence proves nothing: 5..14 are still in doubt
    # the parent's answer, filtered by the new summary from `since`
    out = gd.event_arrived(4, TREE, knowledge(update.since, 20, {6: b6, 12: b12, 15: a15}, update.epoch), "parent")
    assert delivered(out, 2) == [6, 12, 15]  # the broker keeps what matches each subscription
    assert delivered(out, 1) == [12, 15]  # the older one: only what it had not had (the broker matches)


def test_a_parent_resends_from_a_widening_childs_start_filtered_by_the_new_summary():
    gd, _ = node("root", None, ["f"])  # the root: everything comes from the pubend unfiltered
    gd.child_added(0, TREE, "f", extra(1, ("nodes/a/#", "")))
    out = gd.event_arrived(1, TREE, knowledge(0, 10, EVENTS, None), "pubend")
    assert [t for k in sent_to(out, "f") for t in k.ticks] == [3]
    out = gd.received(2, "f", messages.SummaryUpdate(TREE, 2, Summary(frozenset(
        {("nodes/a/#", ""), ("nodes/b/+", "x < 1")})), 4).to_wire())
    again = sent_to(out, "f")
    assert again[0].after == 4 and [t for k in again for t in k.ticks] == [7]
    assert {k.epoch for k in again} == {2}
    # a stale (reordered) narrower summary changes nothing
    out = gd.received(3, "f", messages.SummaryUpdate(TREE, 1, Summary(frozenset({("nodes/a/#", "")})), 0).to_wire())
    assert out == [] and gd.interest(TREE).filter_for("f")[0] == 2


def test_a_forwarder_passes_a_widening_up_when_its_own_summary_does_not_cover_it():
    gd, _ = node("f", "parent", ["a"])
    gd.child_added(0, TREE, "a", extra(1, ("nodes/a/#", "")))
    stamp = gd.interest(TREE).epoch
    gd.event_arrived(1, TREE, knowledge(0, 10, {3: EVENTS[3]}, stamp), "parent")
    out = gd.received(2, "a", messages.SummaryUpdate(TREE, 2, Summary(frozenset({("nodes/#", "")})), 4).to_wire())
    [update] = summaries(out)
    assert update.since <= 4 and update.summary == Summary(frozenset({("nodes/#", "")}))
    assert sent_to(out, "a") == []  # nothing after 4 is known for sure until the parent answers
    out = gd.event_arrived(3, TREE, knowledge(4, 10, {5: EVENTS[5], 7: EVENTS[7]}, update.epoch), "parent")
    assert [t for k in sent_to(out, "a") for t in k.ticks] == [5, 7]


def test_stale_stamps_make_the_child_send_its_summary_again():
    gd, _ = node("f", "parent", [])
    gd.local_subscribe(0, 1, TREE, 0, pattern="nodes/a/#")
    out = gd.event_arrived(1, TREE, knowledge(0, 10, {1: record(1, "nodes/a/x"), 3: EVENTS[3]}, 0), "parent")
    assert delivered(out, 1) == [1]  # data is always good; its silence (2) proves nothing
    [update] = summaries(out)
    assert update.epoch == gd.interest(TREE).epoch
    assert summaries(gd.event_arrived(2, TREE, knowledge(10, 11, {}, 0), "parent")) == []  # once per GCT


# ---- merging never drops a match -----------------------------------------------------------------

PATTERNS = st.sampled_from(["#", "nodes/#", "nodes/+/load", "nodes/a/#", "+/+/load", "nodes/b/mem", "other/#"])
FILTERS = st.sampled_from(["", "x > 1", "x < 1", 'site = "s1"', "exists(x)", "not (x = 2)"])
SUMMARIES = st.one_of(st.none(), st.frozensets(st.tuples(PATTERNS, FILTERS), max_size=4).map(Summary))
EVENT_SAMPLES = st.tuples(st.sampled_from(["nodes/a/load", "nodes/b/mem", "other/c", "nodes/b/load"]),
                          st.fixed_dictionaries({}, optional={"x": st.integers(-2, 3), "site": st.just("s1")}))


def exact(summary: Summary | None, channel: str, attributes: dict[str, Any]) -> bool:
    return summary is None or any(pattern_matches(p, channel) and (not f or parse_filter(f).matches(attributes))
                                  for p, f in summary.entries)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(SUMMARIES, max_size=4), bytes_max=st.integers(0, 200), events=st.lists(EVENT_SAMPLES, max_size=8))
def test_a_merged_summary_matches_whatever_a_part_matches_and_covers_each_part(parts, bytes_max, events):
    merged = merge(parts, bytes_max)
    for part in parts:
        assert covers(merged, part)
        for channel, attributes in events:
            if exact(part, channel, attributes):
                assert merged is None or merged.matches(channel, attributes)


@settings(max_examples=300, deadline=None)
@given(wide=SUMMARIES, narrow=SUMMARIES, events=st.lists(EVENT_SAMPLES, max_size=8))
def test_covers_is_sound(wide, narrow, events):
    if covers(wide, narrow):
        for channel, attributes in events:
            assert not exact(narrow, channel, attributes) or exact(wide, channel, attributes)


CHILDREN = st.sampled_from(["c1", "c2", "c3"])
INTEREST_STEPS = st.lists(st.one_of(
    st.tuples(st.just("own"), st.integers(0, 5), st.booleans(), PATTERNS, FILTERS),  # (re)subscribe, record
    st.tuples(st.just("drop"), st.integers(0, 5), st.booleans()),  # unsubscribe, unrecord
    st.tuples(st.just("summary"), CHILDREN, SUMMARIES),  # a child's summary (joined or changed)
    st.tuples(st.just("left"), CHILDREN),  # a child left (it then gets everything if still a child)
    st.tuples(st.just("children"), st.lists(CHILDREN, max_size=4))),  # Scribe's children table
    max_size=40)


@settings(max_examples=300, deadline=None)
@given(steps=INTEREST_STEPS, bytes_max=st.integers(0, 120))
def test_the_interest_kept_as_parts_come_and_go_is_the_one_merged_from_scratch(steps, bytes_max):
    """Interest.wanted counts local parts in and out and follows the children's summaries
    (MergeCounts); through any sequence it equals `merge` of every part present, rebuilt."""
    from tidings.core.reliability.interest import Interest
    from tidings.core.reliability.summary import of_subscription
    from tidings.core.reliability.tree import Tree

    interest = Interest(TREE, bytes_max, 1)
    t = Tree({}, {}, {}, {}, interest)
    children: list[str] = []
    for epoch, step in enumerate(steps, start=1):
        if step[0] == "own":
            _, key, recorded, pattern, filter_text = step
            t.set_own(key, of_subscription(pattern, filter_text, bytes_max), recorded=recorded)
        elif step[0] == "drop":
            t.drop_own(step[1], recorded=step[2])
        elif step[0] == "summary":
            interest.child_joined(step[1], (epoch, step[2]))
        elif step[0] == "left":
            interest.child_left(step[1])
        else:
            children = step[1]
        for limit in (bytes_max, TICK_MAX):
            rebuilt = merge([*t.own_interests(), *(interest.filter_for(c)[1] for c in children)], limit)
            kept = interest.wanted(children, limit)
            assert kept == rebuilt
            assert interest.wanted(children, limit) is kept  # unchanged: the same object, compared at once


def test_a_new_forwarders_subscribe_carries_its_own_interest_and_the_lower_positions():
    gd, scribe = node("f", None, [])
    gd.local_subscribe(0, 1, TREE, 50, pattern="nodes/a/#")
    scribe.parent = "parent"  # the forwarder is on its way into the tree
    gd.event_arrived(1, TREE, knowledge(50, 60, {}, gd.interest(TREE).epoch), "parent")
    scribe.kids = [*scribe.kids, "a"]  # Scribe adopts, then tells
    gd.child_added(2, TREE, "a", [40, [[PUBEND, 55], ["p-other", 7]], [9, [["nodes/b/#", ""]]]])
    default, positions, (epoch, summary) = gd.forwarder_extra(TREE, [40, [[PUBEND, 55], ["p-other", 7]],
                                                                      [9, [["nodes/b/#", ""]]]])
    assert default == 40 and dict(positions) == {PUBEND: 55, "p-other": 7}
    assert epoch == gd.interest(TREE).epoch != 9  # its own, never the child's
    assert sorted(map(tuple, summary)) == [("nodes/a/#", ""), ("nodes/b/#", "")]


def test_a_forwarder_made_root_doubts_its_filtered_silence_for_each_child_that_joins_earlier():
    """Sim seed 1025. A forwarder with a narrow interest holds F for events its parent filtered out.
    A repair makes it root; one child re-joins wanting everything after tick 8 (the interest widens:
    F after 8 is doubted), then another wanting everything after 4. The F at 5 and 7 was silence
    only for the narrow interest: it must be asked of the pubend again, never sent on as silence."""
    gd, scribe = node("f", "parent", [])
    gd.local_subscribe(0, 1, TREE, 0, pattern="nodes/a/#")
    stamp = gd.interest(TREE).epoch
    # 5 and 7 came as F; (0, 2] not yet (the stream's horizon and floor stay at 0)
    gd.event_arrived(1, TREE, knowledge(2, 10, {3: EVENTS[3]}, stamp), "parent")
    scribe.parent = None  # the parent died: this broker is the root now
    scribe.kids = ["c1", "c2"]
    gd.child_added(2, TREE, "c1", [0, [[PUBEND, 8]], [1, [["nodes/#", ""]]]])
    gd.child_added(3, TREE, "c2", [0, [[PUBEND, 4]], [1, [["nodes/#", ""]]]])
    out = gd.event_arrived(4, TREE, knowledge(0, 2, {}, None), "origin")  # the pubend fills (0, 2]
    told = [(k.after, k.through, k.ticks) for k in sent_to(out, "c2")]
    assert not [k for k in told if k[0] < 5 <= k[1] or k[0] < 7 <= k[1]], told
    assert gd.trees[TREE].istreams[PUBEND].horizon == 4  # (4, 10] is asked of the pubend again


def test_a_childs_nack_from_before_where_the_roots_knowledge_became_good_is_asked_of_the_pubend_again():
    """Total-order sim seeds 2, 3, 5, 6, 8, 10. A forwarder made root (its narrow child c0 holds
    its stream's floor down) adopts a child wanting everything at tick 8 (F after 8 is doubted);
    the child later goes back (its total-order merge waited, its cache dropped the records) and
    nacks from 2. The F at 5 and 7 was silence only for the old narrow interest: it must be asked
    of the pubend again, never sent as the nack's answer; once the pubend has answered, the same
    nack is answered from what came."""
    gd, scribe = node("f", "parent", ["c0"])
    gd.child_added(0, TREE, "c0", [0, [], [1, [["nodes/a/#", ""]]]])  # a narrow child that has not acked
    stamp = gd.interest(TREE).epoch
    gd.event_arrived(1, TREE, knowledge(0, 10, {}, stamp), "parent")  # 5 and 7 came as F
    scribe.parent = None  # the parent died: this broker is the root now
    scribe.kids = ["c0", "c1"]
    gd.child_added(2, TREE, "c1", [0, [[PUBEND, 8]], [1, [["nodes/#", ""]]]])
    gd.event_arrived(3, TREE, knowledge(8, 10, {}, None), "origin")  # the pubend: nothing in (8, 10]
    ist = gd.trees[TREE].istreams[PUBEND]
    assert ist.horizon == 10
    nack = messages.Nack(TREE, PUBEND, ((2, 10),)).to_wire()
    out = gd.received(4, "c1", nack)
    told = [(k.after, k.through, k.ticks) for k in sent_to(out, "c1")]
    assert not [k for k in told if k[0] < 5 <= k[1] or k[0] < 7 <= k[1]], told
    assert ist.horizon == 2  # (2, 8] is asked of the pubend again
    out = gd.event_arrived(5, TREE, knowledge(2, 8, {5: EVENTS[5], 7: EVENTS[7]}, None), "origin")
    assert [t for k in sent_to(out, "c1") for t in k.ticks] == [5, 7]
    out = gd.received(6, "c1", nack)  # the same nack again: answered from what the pubend sent, not doubted
    assert [t for k in sent_to(out, "c1") for t in k.ticks] == [5, 7] and ist.horizon == 10
