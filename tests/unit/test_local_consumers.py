"""The local subscriptions on the tree streams (`LocalConsumers`, beside `TreeStreams`), driven
through the reliability node as the subscription side drives it: a blocked subscription is handed
nothing and, unblocked, what waited, in order; its delivered points and lag say where it is; the
last one to leave a tree with no children drops the tree and asks Scribe to remember its pubend.
"""

from __future__ import annotations

from tests.unit.test_reliability_filtering import EVENTS, PUBEND, TREE, delivered, knowledge, node
from tidings.core.reliability.effects import RememberPublisher


def test_a_blocked_subscription_is_handed_nothing_and_unblocked_what_waited() -> None:
    gd, _ = node("s", "parent", [])
    gd.local_subscribe(0, 1, TREE, 0)
    gd.local_subscribe(0, 2, TREE, 0)
    first = {t: r for t, r in EVENTS.items() if t <= 4}
    out = gd.event_arrived(1, TREE, knowledge(0, 4, first, None), "parent")  # the stream of PUBEND begins
    assert delivered(out, 1) == delivered(out, 2) == [3]
    assert gd.local_flow(2, 1, TREE, blocked=True) == []
    later = {t: r for t, r in EVENTS.items() if t > 4}
    out = gd.event_arrived(3, TREE, knowledge(4, 10, later, None), "parent")
    assert delivered(out, 1) == [] and delivered(out, 2) == [5, 7, 9]
    assert gd.delivered_through(1, TREE) == {PUBEND: 4} and gd.delivered_through(2, TREE) == {PUBEND: 10}
    assert gd.lag(1, TREE) == {PUBEND: 6} and gd.lag(2, TREE) == {PUBEND: 0}
    assert gd.local_flow(4, 1, TREE, blocked=True) == []  # no change: nothing moves
    out = gd.local_flow(5, 1, TREE, blocked=False)
    assert delivered(out, 1) == [5, 7, 9] and delivered(out, 2) == []
    assert gd.delivered_through(1, TREE) == {PUBEND: 10} and gd.lag(1, TREE) == {PUBEND: 0}


def test_the_last_subscription_to_leave_a_childless_tree_drops_it() -> None:
    gd, _ = node("s", "parent", [])
    gd.local_subscribe(0, 1, TREE, 0)
    gd.local_subscribe(0, 2, TREE, 0)
    gd.event_arrived(1, TREE, knowledge(0, 10, EVENTS, None), "parent")
    assert [e for e in gd.local_unsubscribe(2, 1, TREE) if type(e) is RememberPublisher] == []
    assert TREE in gd.trees and gd.delivered_through(1, TREE) == {}  # 2 still has it; 1 is no consumer
    out = gd.local_unsubscribe(3, 2, TREE)
    assert [e for e in out if type(e) is RememberPublisher] == [RememberPublisher(TREE, "origin")]
    assert TREE not in gd.trees and gd.lag(2, TREE) == {}
