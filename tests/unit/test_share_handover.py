"""A group's hand-over between homes (core/share/handover.py, core/share/home.py `moved`)."""

from __future__ import annotations

from tidings.core.durable.checkpoint import Home
from tidings.core.inputs import ConnectionLost
from tidings.core.share import handover as h
from tidings.core.share.group import ShareLimits
from tidings.core.share.home import BrokerInput, Forget, PeerOut, ShareHomes
from tidings.core.share.members import ShareMembers
from tidings.core.share.wire import ShareDeliver, ShareJoin, ShareLeft, ShareMoved

KEY = ("anonymous", "g", "a/#")
OLD = Home("10.0.0.2:7400", "pe2", 4)
S = 1_000_000_000


def test_an_old_home_is_told_until_it_answers_at_longer_and_longer_intervals():
    debts = h.Handover()
    assert debts.owe(0, "me", KEY, OLD) == [(OLD.address, ShareMoved(KEY, "me", "pe2", 4, True))]
    assert debts.owe(0, "me", KEY, OLD) == []  # (once per registration)
    sent = []
    now = 0
    while now < 200 * S:
        now = debts.next_deadline()
        sent += [now] * len(debts.due(now, "me"))
    assert sent[:6] == [1 * S, 3 * S, 7 * S, 15 * S, 31 * S, 63 * S]  # doubling from 1 s ...
    assert sent[6] - sent[5] == h.RETRY_MAX_NS  # ... to a minute
    debts.settled("pe2", 4)
    assert debts.debts == {} and debts.next_deadline() is None and debts.settled_total == 1


def test_a_debt_is_given_up_after_its_keep_and_bounded_in_number():
    debts = h.Handover()
    debts.owe(0, "me", KEY, OLD)
    assert debts.due(h.DEBT_KEEP_NS, "me") == [] and debts.debts == {} and debts.dropped == 1
    for i in range(h.DEBTS_MAX):
        debts.owe(0, "me", KEY, Home("a", "pe", i + 1))
    assert debts.owe(0, "me", KEY, Home("a", "pe", h.DEBTS_MAX + 1)) == [] and debts.dropped == 2


def homes_with_a_group(registration):
    homes = ShareHomes("10.0.0.3:7400")
    homes.joined(0, 0, ShareJoin(KEY, "10.0.0.1:7400", ("c1",)))
    homed = homes.groups[KEY]
    homed.sub = 1
    homed.group.started([0, [], ["10.0.0.3:7400", "pe3", registration]])
    return homes, homed


def test_a_share_moved_stops_the_group_whose_registration_it_names_and_is_answered():
    homes, homed = homes_with_a_group(4)
    out = homes.moved(5, ShareMoved(KEY, "10.0.0.9:7400", "pe3", 4))
    assert KEY not in homes.groups and homes.handed_over == 1 and homes.figures()["share_handed_over"] == 1
    assert BrokerInput(ConnectionLost(5, homed.conn)) in out  # (after the UNSUBSCRIBE that ends it for good)
    assert out[-2:] == [Forget("pe3", 4), PeerOut("10.0.0.9:7400", ShareLeft(KEY, "pe3", 4))]


def test_a_share_moved_for_another_registration_leaves_the_group_here_and_forgets_that_one():
    """The broker is home again since (killed, restarted, a new registration): the SHARE_MOVED is for
    the registration it restored away, not the group's live one."""
    homes, _ = homes_with_a_group(9)
    out = homes.moved(5, ShareMoved(KEY, "10.0.0.9:7400", "pe3", 4))
    assert KEY in homes.groups and homes.handed_over == 0
    assert out == [Forget("pe3", 4), PeerOut("10.0.0.9:7400", ShareLeft(KEY, "pe3", 4))]
    homes.handover.owe(0, homes.me, KEY, OLD)
    homes.left(ShareLeft(KEY, "pe2", 4))
    assert homes.figures()["share_moved_owed"] == 0


def test_a_share_moved_not_taken_leaves_a_registration_the_group_uses():
    homes, _ = homes_with_a_group(4)
    assert homes.moved(5, ShareMoved(KEY, "10.0.0.9:7400", "pe3", 4, False)) == [
        PeerOut("10.0.0.9:7400", ShareLeft(KEY, "pe3", 4))]
    assert KEY in homes.groups and homes.handed_over == 0


def test_a_member_broker_tells_its_position_after_its_last_member_left_and_a_new_home_owes_the_old():
    """The member broker's JOINs without members carry the position for empty_tell_ns; one reaching
    a broker where the group is not homed, naming another home, is a debt not `taken`, asked once."""
    members = ShareMembers("10.0.0.1:7400", ShareLimits())
    members.join(0, 1, "c", KEY)
    position = [0, [["pe", 5]], [OLD.address, OLD.pubend, OLD.registration]]
    members.delivered(ShareDeliver(KEY, OLD.address, "c@1", 1, ["pe", 5], position))
    [first] = members.leave(1, 1, KEY)
    joins = [first]
    now = 1
    while (deadline := members.next_deadline()) is not None:
        now = deadline
        joins += members.handle_timeout(now)
    assert {(j.join.clients, str(j.join.position)) for j in joins} == {((), str(position))}
    assert len(joins) == ShareLimits().empty_tell_ns // S and members.positions == {}
    members.join(now, 2, "d", KEY)
    members.delivered(ShareDeliver(KEY, OLD.address, "d@2", 2, ["pe", 6], position))
    [told] = members.leave(now + 1, 2, KEY)
    assert told.join.position == position  # (the tail begins)
    [again] = members.join(now + 2, 3, "e", KEY)  # (a member again within the tail: no position, as before)
    assert again.join.position is None and members.positions == {}

    homes = ShareHomes("10.0.0.3:7400")
    [told] = homes.joined(2, 0, first.join)
    assert told == PeerOut(OLD.address, ShareMoved(KEY, "10.0.0.3:7400", "pe2", 4, False)) and not homes.groups
    homes.left(ShareLeft(KEY, "pe2", 4))
    assert homes.joined(3, 0, first.join) == []  # (answered: not asked again)
    assert ShareHomes(OLD.address).joined(2, 0, first.join) == []  # the home named: nothing owed
