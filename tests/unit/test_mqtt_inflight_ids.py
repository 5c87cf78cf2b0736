"""core/mqtt/inflight_ids.py and will_saved.py as plain data structures: a restarted session's
records claimed as their events come again (stale ones dropped, their ids freed), sends held for a
save in order, and the wills kept across a restart read back, due and dropped."""

import msgpack

from tidings.core.effects import Disconnect, Send
from tidings.core.mqtt.inflight import Deliveries
from tidings.core.mqtt.inflight_ids import DurableIds, SessionIds
from tidings.core.mqtt.will_saved import SavedWill, SavedWills


def test_records_are_claimed_by_place_and_the_ones_passed_over_are_dropped():
    deliveries = Deliveries(10, 100)
    records = [(("a/#", "p1", 10), 7, False), (("a/#", "p1", 20), 8, True), (("a/#", "p2", 5), 9, False)]
    ids = SessionIds(records, deliveries, skip={("a/#", "p2", 5)})  # (p2's was resent already)
    assert deliveries.ids.used == {7, 8}  # reserved: no new delivery takes them
    assert ids.claim(("a/#", "p1", 20)) == (8, True)  # its PUBREL is what goes again
    assert ids.pending == {} and deliveries.ids.used == set()  # tick 10 was passed over: dropped, freed
    assert ids.claim(("a/#", "p1", 10)) is None


def test_sends_wait_for_their_save_in_order_and_a_disconnect_lets_them_go_first():
    ids = DurableIds()
    ids.holding[1] = 3
    out = ids.hold([Send(1, b"a"), Send(2, b"x"), Send(1, b"b")])
    assert out == [Send(2, b"x")]
    assert ids.release(2) == [] and ids.release(3) == [Send(1, b"ab")]
    ids.holding[1] = 4
    assert ids.hold([Send(1, b"c"), Disconnect(1, "bye")]) == [Send(1, b"c"), Disconnect(1, "bye")]
    assert ids.holding == {} and ids.held == {}


def test_records_are_saved_and_read_back():
    ids = DurableIds()
    ids.left(("svc", "c1"), [(("f", "p", 3), 5, True)])
    rows = msgpack.unpackb(msgpack.packb(ids.rows([(("svc", "c2"), [(("g", "q", 4), 6, False)])], 0)))
    back = DurableIds(rows)
    assert back.take(("svc", "c2")) == [(("g", "q", 4), 6, False)]
    assert back.take(("svc", "c1")) == [(("f", "p", 3), 5, True)]
    assert DurableIds("not rows").away == {}


def test_wills_kept_across_a_restart_are_due_at_their_time_or_dropped():
    wills = SavedWills()
    wills.held(("mqtt", "a"), SavedWill("anonymous", 1_000, "w/a", {"mqtt.qos": 0}, b"A"))
    wills.held(("mqtt", "b"), SavedWill("anonymous", 2_000, "w/b", {}, b"B"))
    assert wills.changed and wills.next_us() is None  # (this run's own: their connections time them)
    back = SavedWills(msgpack.unpackb(msgpack.packb(wills.rows())))
    assert back.next_us() == 1_000 and back.bytes == 2
    assert back.due(999) == []
    assert back.due(1_500) == [(("mqtt", "a"), SavedWill("anonymous", 1_000, "w/a", {"mqtt.qos": 0}, b"A"))]
    assert back.drop(("mqtt", "b")) is not None and back.next_us() is None and back.bytes == 0
