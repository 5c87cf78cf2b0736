"""Reading client connections (core/broker/reading.py), as a machine of its own: a connection is read
only while nothing holds it, each hold is released by its owner alone, and what it sent waits, in
order, until then."""

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tidings.core.auth.guard import Guard
from tidings.core.broker.advice import RouteAdvice
from tidings.core.broker.connection import Hold, Opened
from tidings.core.broker.reading import Reading
from tidings.core.broker.refusals import ClientErrors
from tidings.core.config import BrokerConfig
from tidings.core.effects import Disconnect, PauseReading, ResumeReading, Send
from tidings.core.session.client_session import ClientSession
from tidings.core.wire import decoders, messages


class Owner:
    """The owner of every message the reading machine reads (as the composer is): what it was
    handed, in order, as (connection, message)."""

    def __init__(self):
        self.served = []

    def __call__(self, now, c, msg, out):
        self.served.append((c, msg))
        return 0

    def take(self):
        served, self.served = self.served, []
        return served


def reading(**config):
    """A reading machine and the owner it hands every message to."""
    cfg = BrokerConfig(**config)
    r = Reading(cfg, Guard.open(), ClientErrors(), RouteAdvice("p", cfg))
    owner = Owner()
    r.serve_to(owner, {})
    return r, owner


def timed_out(r, owner, now, out):
    """The reading machine's timers at `now`, carried out in order as the broker does: what each
    served (connection, message)."""
    r.timed_out(now, out)
    return owner.take()


def opened(r, owner, conn=1):
    """A connection through its handshake: its session (the owner was told it is open)."""
    out = []
    r.accept(0, conn, out)
    session = ClientSession("svc", "i")
    r.received(0, conn, session.hello(), out)
    assert [msg for _, msg in owner.take()] == [Opened()]
    assert isinstance(decoders.decode_broker_message(out[0].data[4:]), messages.Welcome)
    return session


def test_a_connection_is_read_only_once_every_owner_released_it():
    r, owner = reading()
    session = opened(r, owner)
    c = r.connections[1]
    out = []
    r.hold(c, Hold.RATE, until=50)
    assert r.flow(1, True, out) is c and out == [PauseReading(1)]  # its send queue is full too
    assert r.unread(1) and not r.unread(2)
    r.received(1, 1, session.renew() + session.renew(), out)
    assert owner.take() == []  # held: nothing is read
    r.release(2, 1, Hold.SEND, out)
    assert owner.take() == []  # the rate still holds it
    assert r.flow(1, False, out) is c and r.flow(1, False, out) is None  # (once)
    served = timed_out(r, owner, 50, out)  # the rate's hold ends: both RENEWs, in order
    assert [type(msg) for _, msg in served] == [messages.Renew, messages.Renew]
    assert out[-1] == ResumeReading(1) and not r.unread(1)


def test_connections_max_and_the_handshake_deadline():
    r, owner = reading(connections_max=1, handshake_timeout_ns=10)
    out = []
    r.accept(0, 1, out)
    r.accept(0, 2, out)
    assert [type(e) for e in out] == [Send, Disconnect] and list(r.connections) == [1]
    assert r.next_deadline() == 10
    out.clear()
    assert timed_out(r, owner, 10, out) == []
    assert [type(e) for e in out] == [Send, Disconnect] and r.lost(1) is not None and r.next_deadline() is None


def test_a_stalled_partial_frame_waits_while_held_and_closes_once_read():
    r, owner = reading(frame_progress_timeout_ns=100)
    session = opened(r, owner)
    c = r.connections[1]
    out = []
    part = session.renew()[:2]
    r.received(0, 1, part, out)
    assert owner.take() == []
    assert r.partials.held_bytes == 2 and r.next_deadline() == 100
    r.hold(c, Hold.RATE, until=10**6)
    assert r.frames_overdue(100, out) == [] and out == []  # held: its frame could not move
    r.release(150, 1, Hold.RATE, out)
    assert r.frames_overdue(250, out) == [] and out[-1] == Disconnect(1, out[-1].reason)
    assert r.partials.held_bytes == 0


class ReadingMachine(RuleBasedStateMachine):
    """Random holds, releases, send-queue flow, bytes and time on one open connection, against a
    reference: what it sent is served in order, only while no owner holds it, and the runtime is
    told to pause and resume reading once each way, exactly when the hold set changes."""

    def __init__(self):
        super().__init__()
        self.r, self.owner = reading()
        self.session = opened(self.r, self.owner)
        self.c = self.r.connections[1]
        self.now = 1
        self.holds: set[Hold] = set()  # the reference
        self.until: dict[Hold, int] = {}  # the holds that end at a deadline
        self.sent = 0  # RENEWs sent
        self.served = 0  # RENEWs served
        self.paused = False  # what the runtime was last told

    def _take(self, out, served):
        for e in out:
            if isinstance(e, PauseReading | ResumeReading):
                assert self.paused == isinstance(e, ResumeReading)  # once each way
                self.paused = isinstance(e, PauseReading)
        for _, msg in served:
            assert isinstance(msg, messages.Renew) and not self.holds
            self.served += 1

    @rule(count=st.integers(1, 3))
    def send(self, count):
        out = []
        self.sent += count
        self.r.received(self.now, 1, self.session.renew() * count, out)
        self._take(out, self.owner.take())

    @rule(why=st.sampled_from([Hold.RATE, Hold.REFUSED]), after=st.integers(1, 50))
    def hold(self, why, after):
        self.r.hold(self.c, why, self.now + after)
        self.holds.add(why)
        self.until[why] = self.now + after
        out = []
        self.c.sync_reading(out)
        self._take(out, [])

    @rule(blocked=st.booleans())
    def flow(self, blocked):
        out = []
        changed = self.r.flow(1, blocked, out)
        assert (changed is not None) == (blocked != (Hold.SEND in self.holds))
        if blocked:
            self.holds.add(Hold.SEND)
        elif changed is not None:
            self.holds.discard(Hold.SEND)
            self.r.release(self.now, 1, Hold.SEND, out)
        self._take(out, self.owner.take())

    @rule(step=st.integers(1, 60))
    def tick(self, step):
        self.now += step
        for why in [why for why, until in self.until.items() if until <= self.now]:
            del self.until[why]
            self.holds.discard(why)
        out = []
        self._take(out, timed_out(self.r, self.owner, self.now, out))

    @invariant()
    def read_only_when_nothing_holds(self):
        assert set(self.c.holds) == self.holds
        assert self.r.unread(1) == bool(self.holds) and not self.r.unread(2)
        if not self.holds:
            assert self.served == self.sent  # nothing waits on a connection that is read
        assert self.paused == bool(self.holds)


TestReadingMachine = ReadingMachine.TestCase
TestReadingMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


def test_a_publish_its_owner_cannot_take_yet_waits_at_the_head_and_holds_the_connection():
    """Each message goes to its type's owner as it is read; a PUBLISH whose owner says "wait" is
    put back at the head and the connection held (RATE) until then, at least publish_wait_ns_min:
    what follows it is not read meanwhile, and the PUBLISH is handed over again first."""
    r, owner = reading(publish_wait_ns_min=20)
    opened(r, owner)
    waits = [5, 0]  # the owner's answers: wait 5 ns (less than the minimum), then take it
    publishes = []

    def intake(now, c, msg, out):
        publishes.append((now, msg.seq))
        return waits.pop(0)

    r.serve_to(owner, {messages.Publish: intake})
    out = []
    r.received(1, 1, messages.publish(7, [["a", {}, b"x"]]) + messages.renew(), out)
    assert publishes == [(1, 7)] and owner.take() == [] and out == [PauseReading(1)]
    assert r.unread(1) and r.next_deadline() == 21  # now + publish_wait_ns_min
    served = timed_out(r, owner, 21, out)
    assert publishes == [(1, 7), (21, 7)] and [type(msg) for _, msg in served] == [messages.Renew]
    assert out[-1] == ResumeReading(1) and not r.unread(1)
