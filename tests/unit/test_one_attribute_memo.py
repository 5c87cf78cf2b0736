"""Events with one attribute (an MQTT QoS 0 event's `mqtt.qos`) are checked and matched once per
(name, value, type of value): the intake remembers one-attribute maps it found valid
(core/publish/intake.py `_attributes_ok`), the subscription table matches such an event once per
sync and channel (core/subscription/table.py `synced`). Neither may change an answer: the intake
refuses exactly what `validate_attributes` refuses, whatever was remembered before, and an event
goes to the subscriptions it would go to with a second attribute no filter names (matched then
event by event)."""

from __future__ import annotations

from typing import Any

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.errors import TidingsError
from tidings.core.event import validate_attributes
from tidings.core.wire import messages
from tidings.core.wire.frames import frame

from .core_harness import Harness, delivered

values = st.one_of(st.sampled_from([0, 1, 2, True, False, 0.0, 1.0, 2.0**70, 2**70, -(2**64), "0", "", None,
                                    float("nan"), float("inf"), [1], {"a": 1}, b"1", "x" * 70000]),
                   st.integers(), st.floats(), st.text(max_size=3))
names = st.sampled_from(["k", "mqtt.qos", "", "n" * 300, 1])
one_attribute = st.builds(lambda name, value: {name: value}, names, values)


def expected(attributes: Any) -> bool:
    try:
        validate_attributes(attributes)
    except TidingsError:
        return False
    return True


@settings(max_examples=200, deadline=None)
@given(st.lists(one_attribute, max_size=12))
def test_the_intake_refuses_what_validate_attributes_refuses_whatever_it_remembers(maps: list[Any]) -> None:
    h = Harness()
    intake = h.broker.intake
    h.connect(1)
    h.publish(1, ("a/b", b"p", {}))  # the channel known: the fast path's
    events: list[object] = [["a/b", attributes, b"p"] for attributes in maps] * 2  # (again: from the memo)
    valid, problems = intake._check(0, None, events, None, None, {})  # type: ignore[arg-type]
    assert sorted(problems) == [i for i, ev in enumerate(events) if not expected(ev[1])]  # type: ignore[index]
    assert [a for _, a, _ in valid] == [ev[1] for ev in events if expected(ev[1])]  # type: ignore[index]


def test_a_remembered_attribute_does_not_let_an_unhashable_or_other_typed_value_through() -> None:
    h = Harness()
    h.connect(1)
    h.publish(1, ("a/b", b"p", {"k": 1}))
    h.sync()
    h.inbox(1)
    events = [["a/b", {"k": 1}, b"ok"], ["a/b", {"k": [1]}, b"bad"], ["a/b", {"k": None}, b"bad"],
              ["a/b", {"k": 1.0}, b"ok"]]
    h.send(1, frame(msgpack.packb([messages.ClientType.PUBLISH, 9, events])))
    h.sync()
    acks = [m for m in h.inbox(1) if isinstance(m, messages.Ack)]
    assert [t is not None for t in acks[-1].ticks] == [True, False, False, True]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a/b", "a/c", "b"]),
                          st.sampled_from([0, 1, 2, True, False, 1.0, 0.5, "1", "x"])), min_size=1, max_size=20))
def test_one_attribute_events_go_where_event_by_event_matching_sends_them(events: list[tuple[str, Any]]) -> None:
    h = Harness()
    h.connect(1)
    h.connect(2)
    subs = [h.subscribe(2, "a/#", "k == 1"), h.subscribe(2, "a/#", "k > 0.5"), h.subscribe(2, "#", "k == true"),
            h.subscribe(2, "a/b", "k == \"1\""), h.subscribe(2, "#")]
    h.inbox(1)
    h.inbox(2)
    # each event twice: alone with its attribute (the memo's), then with one more that no filter names
    h.publish(1, *[(ch, b"p", attrs) for ch, v in events for attrs in ({"k": v}, {"k": v, "z": 0})])
    h.sync()
    got: dict[int, list[int]] = {}
    for sub, tick in delivered(h.inbox(2)):
        got.setdefault(tick, []).append(sub)
    ticks = [t for t, _ in h.records]
    assert len(ticks) == 2 * len(events)
    for one, two in zip(ticks[::2], ticks[1::2], strict=True):
        assert sorted(got.get(one, [])) == sorted(got.get(two, []))
    assert all(subs)
