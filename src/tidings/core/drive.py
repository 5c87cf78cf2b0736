"""The one driver of a sans-IO broker core, shared by the asyncio runtime and the simulator.

Theory of operation. A runtime (aio/server.py, sim/broker_node.py) owns the clocks, the sockets and
the disk; the core (core/broker/broker.py `Broker`) owns every rule. Between them sits this loop,
written once so that both runtimes drive the core the same way:

- **feed**: each fact the runtime observes becomes an input handed to `handle`, which returns
  effects;
- **apply**: the effects are carried out in order, each by the runtime's handler for its type
  (`Handlers`), after `coalesce_sends` joined each connection's Sends into one write. An effect
  no handler takes is a bug (an effect the core produced that no runtime knows how to carry out)
  and raises `UnhandledEffect`: nothing is dropped without a word;
- **deferred inputs**, one re-entrancy rule: an input raised while effects are being applied (a
  transport calls pause_writing from inside its write; a simulated socket does the same) is queued
  and handled after the effects of the current input, first in first out. The core therefore never
  sees an input while it is inside `handle`, and the order does not depend on the runtime;
- **held effects**: `hold` hands the core an input now and returns its effects unapplied; the
  runtime applies them later with `run`, or drops them with the core (`close`). The asyncio
  runtime tells the core of a commit made in its own thread while the disk is still writing it,
  and applies the answer (ACKs, deliveries, knowledge) once the fsync returned: nothing leaves
  before the disk has the events, and nothing else reaches the core in between (one thread). If
  the fsync fails, the answer and the core are dropped together, as in a crash
  (aio/storage_worker.py, "The core hears of a commit early");
- **arm**: once the queue is empty the core's `next_deadline()` is compared with the timer the
  runtime holds, and the runtime is told to move it only when it changed (`Runtime.arm`); when it
  fires, the runtime calls `fired(now, wall_us)` and the core hears `TimerFired`. Asking costs
  next to nothing: the core keeps its earliest deadline as its machines' timers move, and walks
  them only when one at the earliest moved or fell due (core/deadlines.py `Alarm`).

`close()` ends a driver for good (the simulator's crash: the core object is discarded): queued inputs
are dropped, later ones are ignored, and the timer is disarmed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol, get_args

from tidings.core.effects import Effect, coalesce_sends
from tidings.core.inputs import Input, TimerFired

Handlers = Mapping[type[Any], Callable[[Any], None]]  # effect type -> the runtime's I/O for it
EFFECT_TYPES: tuple[type[Any], ...] = get_args(Effect)


class UnhandledEffect(AssertionError):
    """The core produced an effect no handler of the runtime carries out: our bug, never bad input."""


class Runtime(Protocol):
    """What a runtime gives the driver besides its effect handlers."""

    def arm(self, deadline: int | None) -> None:
        """Make the one timer fire at `deadline` (monotonic ns; None: no timer), replacing any other;
        when it fires, call `Driver.fired`."""

    def settled(self) -> None:
        """Every queued input was handled: the runtime's own bookkeeping (logs, waiters) may look."""


class Driver:
    __slots__ = ("_armed", "_closed", "_handle", "_handlers", "_inputs", "_next_deadline", "_running", "_runtime")

    def __init__(self, handle: Callable[[Input], list[Effect]], next_deadline: Callable[[], int | None],
                 handlers: Handlers, runtime: Runtime) -> None:
        """`handle` and `next_deadline`: the core's (or a wrapper that traces or measures around
        them); `handlers` must carry out every effect type the core may produce (checked here)."""
        missing = [t.__name__ for t in EFFECT_TYPES if t not in handlers]
        if missing:
            raise UnhandledEffect(f"the runtime has no handler for {', '.join(missing)}")
        self._handle = handle
        self._next_deadline = next_deadline
        self._handlers = handlers
        self._runtime = runtime
        self._inputs: deque[Input] = deque()
        self._running = False
        self._closed = False
        self._armed: int | None = None

    def feed(self, inp: Input) -> None:
        """Handle `inp` and apply its effects, then every input that applying them raised; then arm
        the timer. Called while effects are being applied, it only queues `inp`."""
        if self._closed:
            return
        self._inputs.append(inp)
        if not self._running:
            self.run([])

    def run(self, effects: list[Effect]) -> None:
        """Apply `effects` (what a call on the core other than `handle` returned: starting the
        overlay, reloading the rules), then every queued input, in order; then arm the timer."""
        assert not self._running, "the driver is not re-entered: inputs raised while applying are fed"
        if self._closed:
            return
        self._running = True
        try:
            self._apply(effects)
            inputs = self._inputs
            while inputs and not self._closed:
                self._apply(self._handle(inputs.popleft()))
        finally:
            self._running = False
        if not self._closed:
            self._runtime.settled()
            self._arm()

    def hold(self, inp: Input) -> list[Effect] | None:
        """Handle `inp` at once and return its effects unapplied, for `run` (or, with the core,
        `close`) later; the runtime feeds nothing until then. None when it cannot be handled out
        of turn: the driver is applying effects, has inputs queued, or is closed (then `feed` it)."""
        if self._running or self._inputs or self._closed:
            return None
        self._running = True
        try:
            return self._handle(inp)
        finally:
            self._running = False

    def fired(self, now: int, wall_us: int) -> None:
        """The runtime's timer fired (it holds none now)."""
        self._armed = None
        self.feed(TimerFired(now, wall_us))

    def close(self) -> None:
        """The core is gone: drop what waits, ignore what comes, disarm the timer."""
        self._closed = True
        self._inputs.clear()
        if self._armed is not None:
            self._armed = None
            self._runtime.arm(None)

    def _apply(self, effects: list[Effect]) -> None:
        if not effects:  # (`feed`'s run brings none of its own)
            return
        handlers = self._handlers
        for eff in coalesce_sends(effects):
            handler = handlers.get(type(eff))
            if handler is None:
                raise UnhandledEffect(f"no runtime handler for the effect {eff!r}")
            handler(eff)
            if self._closed:  # a handler crashed the node (a simulated fault): the rest is lost
                return

    def _arm(self) -> None:
        deadline = self._next_deadline()
        if deadline != self._armed:
            self._armed = deadline
            self._runtime.arm(deadline)
