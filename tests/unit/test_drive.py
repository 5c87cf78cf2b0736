"""The one driver (core/drive.py): inputs raised while effects are applied wait their turn, first in
first out; the timer moves only when the core's deadline changed; an effect no runtime handler
takes raises instead of vanishing."""

from __future__ import annotations

from typing import Any

import pytest

from tidings.core.drive import EFFECT_TYPES, Driver, UnhandledEffect
from tidings.core.effects import Disconnect, Effect, Send
from tidings.core.inputs import Accepted, Input, SendBlocked, TimerFired


class FakeCore:
    """Answers each input with a Send to its connection (and a Disconnect for conn 9); its deadline
    is whatever the test sets."""

    def __init__(self) -> None:
        self.handled: list[Input] = []
        self.deadline: int | None = None
        self.inside = False

    def handle(self, inp: Input) -> list[Effect]:
        assert not self.inside, "the core was re-entered"
        self.inside = True
        self.handled.append(inp)
        conn = getattr(inp, "conn", 0)
        out: list[Effect] = [Send(conn, b"x")]
        if conn == 9:
            out.append(Disconnect(conn, "bye"))
        self.inside = False
        return out

    def next_deadline(self) -> int | None:
        return self.deadline


class FakeRuntime:
    def __init__(self) -> None:
        self.armed: list[int | None] = []
        self.sent: list[int] = []
        self.settles = 0

    def arm(self, deadline: int | None) -> None:
        self.armed.append(deadline)

    def settled(self) -> None:
        self.settles += 1


def make(core: FakeCore, on_send: Any = None) -> tuple[Driver, FakeRuntime]:
    rt = FakeRuntime()
    handlers: dict[type[Any], Any] = {t: (lambda eff: None) for t in EFFECT_TYPES}
    handlers[Send] = on_send or (lambda eff: rt.sent.append(eff.conn))
    return Driver(core.handle, core.next_deadline, handlers, rt), rt


def test_inputs_raised_while_applying_are_handled_after_in_order():
    core = FakeCore()
    driver: Driver | None = None

    def send(eff: Send) -> None:  # a transport that reports back-pressure from inside its write
        assert driver is not None
        if eff.conn == 1:
            driver.feed(SendBlocked(0, 2))
            driver.feed(SendBlocked(0, 3))

    driver, rt = make(core, send)
    driver.feed(Accepted(0, 1))
    assert [getattr(i, "conn", None) for i in core.handled] == [1, 2, 3] and rt.settles == 1


def test_the_timer_moves_only_when_the_deadline_changes():
    core = FakeCore()
    driver, rt = make(core)
    core.deadline = 50
    driver.feed(Accepted(0, 1))
    driver.feed(Accepted(1, 2))  # same deadline: left alone
    core.deadline = None
    driver.feed(Accepted(2, 3))
    core.deadline = 70
    driver.fired(60, 0)  # the timer fired: the runtime holds none, so the same deadline is armed again
    assert rt.armed == [50, None, 70] and type(core.handled[-1]) is TimerFired


def test_an_effect_no_handler_takes_raises():
    core = FakeCore()
    with pytest.raises(UnhandledEffect, match="Disconnect"):
        Driver(core.handle, core.next_deadline, {Send: lambda eff: None}, FakeRuntime())
    driver, _ = make(core)

    class Stray:
        pass

    with pytest.raises(UnhandledEffect, match="Stray"):
        driver.run([Stray()])  # type: ignore[list-item]


def test_a_closed_driver_drops_what_waits_and_disarms():
    core = FakeCore()
    driver: Driver | None = None

    def send(eff: Send) -> None:  # the node crashes while applying: what it raised is lost
        assert driver is not None
        if eff.conn == 1:
            driver.feed(SendBlocked(0, 2))
            driver.close()

    driver, rt = make(core, send)
    core.deadline = 10
    driver.feed(Accepted(0, 5))
    driver.feed(Accepted(0, 1))
    driver.feed(Accepted(0, 3))
    assert [getattr(i, "conn", None) for i in core.handled] == [5, 1] and rt.armed == [10, None]


def test_hold_handles_now_and_applies_only_when_run():
    """`hold`: the core hears the input at once, its effects wait for `run` (the loop's commit holds
    a sync's answer until the fsync returned); dropped with the core by `close`; refused (None) while
    the driver applies effects, so that an input is never handled out of turn."""
    core = FakeCore()
    driver, rt = make(core)
    held = driver.hold(Accepted(0, 3))
    assert [type(i) for i in core.handled] == [Accepted] and rt.sent == [] and rt.armed == []
    assert held is not None
    core.deadline = 50
    driver.run(held)
    assert rt.sent == [3] and rt.armed == [50] and rt.settles == 1

    refused: list[object] = []
    driver2, _ = make(core, on_send=lambda eff: refused.append(driver2.hold(Accepted(0, 4))))
    driver2.feed(Accepted(0, 5))
    assert refused == [None]

    dropped = driver.hold(Accepted(0, 6))
    assert dropped is not None
    driver.close()
    driver.feed(Accepted(0, 7))
    assert rt.sent == [3] and driver.hold(Accepted(0, 8)) is None
    assert [getattr(i, "conn", None) for i in core.handled][-1] == 6
