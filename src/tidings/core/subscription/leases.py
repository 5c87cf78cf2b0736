"""Leases on subscriptions (PsEPR §3.3): a subscription lives only while its client says it does.

Theory of operation. A client that vanishes without closing its connection (its host died, it was
frozen, a middlebox dropped the flow) leaves a TCP connection that looks open for as long as nothing
is written to it, and with it subscriptions that keep their trees joined, their streams attached
and their queues growing. So every connection that holds at least one subscription holds a lease
of `lease_ns`, granted in WELCOME (`lease_ns` in its info map). A SUBSCRIBE starts or extends the
lease; a RENEW frame, which the client library sends every third of the lease while it is
connected, extends it. A lease that runs out ends every subscription of its connection (`lapsed`:
each gets an ERROR `lease-expired`, so a client that was only late learns why, then an
`EndSubscription` for the subscription side) and the broker's composer removes them everywhere:
the index, the local streams, the trees (a pruning UNSUBSCRIBE goes up each tree). The connection
itself stays open: it may still publish, and a late client may subscribe again. A connection
without subscriptions holds no lease and costs no timer.

One lease per connection rather than per subscription: renewals come from the client as a whole,
so one deadline says the same thing with one timer. A connection whose RENEWs the broker is not
reading (held for its send queue, its rate, the disk or a refusal window: `unread`) cannot renew,
so its lease runs on from the moment it would have expired. Time follows the one timer contract:
`next_deadline()`, and `handle_timeout(now)` returns a `LeaseExpired` for each lease that ran out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from tidings.core import errors
from tidings.core.deadlines import Alarm, Deadlines
from tidings.core.effects import Send
from tidings.core.wire import messages


class LeaseTimer(NamedTuple):
    conn: int


class LeaseExpired(NamedTuple):
    """`conn` did not renew its lease in time: its subscriptions end (it holds no lease now)."""

    conn: int


def _all_read(conn: int) -> bool:
    return False


class Leases:
    __slots__ = ("_timers", "_unread", "expired_total", "lease_ns")

    def __init__(self, lease_ns: int, unread: Callable[[int], bool] = _all_read, alarm: Alarm | None = None) -> None:
        """`unread(conn)`: whether the broker is not reading `conn` now (its RENEWs wait unread);
        `alarm`: the broker's earliest deadline (core/deadlines.py)."""
        self.lease_ns = lease_ns
        self._unread = unread
        self._timers: Deadlines[LeaseTimer] = Deadlines(alarm)
        self.expired_total = 0

    def hold(self, now: int, conn: int) -> None:
        """`conn` subscribed: its lease runs from now."""
        self._timers.set(LeaseTimer(conn), now + self.lease_ns)

    def renew(self, now: int, conn: int) -> bool:
        """A RENEW from `conn`: extend its lease if it holds one (False: it holds none)."""
        key = LeaseTimer(conn)
        if key not in self._timers:
            return False
        self._timers.set(key, now + self.lease_ns)
        return True

    def release(self, conn: int) -> None:
        """`conn` holds no subscription any more, or is gone."""
        self._timers.cancel(LeaseTimer(conn))

    def expires_at(self, conn: int) -> int | None:
        return self._timers.when(LeaseTimer(conn))

    def next_deadline(self) -> int | None:
        return self._timers.next_deadline()

    def handle_timeout(self, now: int) -> list[LeaseExpired]:
        """The leases that ran out by `now`, earliest first; those of connections not read run on."""
        out: list[LeaseExpired] = []
        for key in self._timers.pop_due(now):
            if self._unread(key.conn):
                self.hold(now, key.conn)
            else:
                out.append(LeaseExpired(key.conn))
        self.expired_total += len(out)
        return out

    def __len__(self) -> int:
        return len(self._timers)


class EndSubscription(NamedTuple):
    """For the subscription side: subscription `sub` of connection `conn` ends here (`ended`: for
    good; else a durable one stays registered, away)."""

    conn: int
    sub: int
    ended: bool


LeaseEffect = Send | EndSubscription


def lapsed(conn: int, subs: Iterable[int]) -> list[LeaseEffect]:
    """The lease of `conn` ran out: each of its subscriptions `subs` is told why, then ends (a
    durable one is away, not ended)."""
    out: list[LeaseEffect] = []
    for sub in subs:
        out.append(Send(conn, messages.error(errors.LEASE_EXPIRED, "the subscription's lease expired: "
                                             "the client did not renew it in time", sub=sub)))
        out.append(EndSubscription(conn, sub, ended=False))
    return out
