"""The table of local subscriptions (core/subscription/table.py) on its own."""

from __future__ import annotations

from tidings.core.auth.guard import Guard
from tidings.core.effects import Send
from tidings.core.subscription.leases import EndSubscription
from tidings.core.subscription.table import LocalSubscriptions, Reader
from tidings.core.wire import decoders, messages


def _open(table: LocalSubscriptions, sub: int, end: int | None = None) -> int:
    s = table.open(7, sub, "me", "a/#", None, 0, end, from_oldest=False, total=False, bulk=False, spans=False)
    return s.key


def test_readers_are_told_apart_by_the_keys_the_table_gave():
    table = LocalSubscriptions(Guard.open())
    assert table.reader(1) is Reader.PUBEND  # no key given yet
    first, second = _open(table, 1), _open(table, 2)
    assert (first, second) == (1, 2)
    assert table.reader(first) is Reader.SUBSCRIPTION
    assert table.reader(-1) is Reader.PUBEND and table.reader(0) is Reader.PUBEND and table.reader(3) is Reader.PUBEND
    table.joined(table.subends[first])
    table.drop(table.subends[first])
    assert table.reader(first) is Reader.GONE  # ended while its read was in flight: not the pubend's


def test_a_failed_read_tells_the_client_and_ends_the_subscription_away():
    table = LocalSubscriptions(Guard.open())
    key = _open(table, 4)
    effects = table.read_failed(key, "disk on fire")
    assert isinstance(effects[0], Send) and effects[1] == EndSubscription(7, 4, ended=False)
    error = decoders.decode_broker_message(effects[0].data[4:])
    assert isinstance(error, messages.Error) and error.code == "log-unreadable" and error.context["sub"] == 4
    assert table.read_failed(key + 1, "unknown") == []


def test_bounded_subscriptions_leave_no_index_entry_and_no_tree():
    table = LocalSubscriptions(Guard.open())
    bounded = table.subends[_open(table, 1, end=5)]
    live = table.subends[_open(table, 2)]
    table.joined(live)
    assert len(table.index) == 1
    assert table.drop(bounded) is False and table.drop(live) is True
    assert len(table.index) == 0 and table.subends == {}
