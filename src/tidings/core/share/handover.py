"""A group's hand-over from its old home to its new one (docs/mqtt.md "Shared subscriptions").

Theory of operation. A group's position names the home whose durable subscription it was taken
from (`[address, pubend, registration]`, the token's home: core/durable/checkpoint.py), and the
members' brokers hand it to whichever broker their JOINs reach. When a group homed here starts from
a position that names another home (the old home was killed, or a closer broker joined the overlay
and the JOINs reach this one now), this broker *owes* the old home a SHARE_MOVED
(core/share/wire.py, `owe`):

- an old home still alive stops the group at once, without waiting for the members' brokers to go
  silent (`member_expiry_ns`): it is no longer home, so it hands out nothing more, and it ends the
  group's durable subscription for good (core/share/home.py `moved`);
- an old home that was killed gets it once it is back: it forgets the group's registration it
  restored away from its saved state, which would otherwise hold back the release of what the
  group had not acknowledged there for `durable_expiry_ns` (7 days);
- either way it answers SHARE_LEFT (`settled`).

A position also comes in a JOIN without members: a member broker whose last member left keeps
telling the group's home its position for `empty_tell_ns` (core/share/members.py). One that reaches
a broker where the group is not homed, naming another home, makes a debt too, not `taken`: the old
home (killed while the group had no member, in its `empty_keep_ns`) forgets the registration when it
is back, unless its group is using it (it is alive and still home: the JOIN was routed elsewhere
while the overlay settled). Such a debt once answered is remembered (`done`, at most `DEBTS_MAX`),
so the JOINs repeated each second do not ask again.

Until the answer, SHARE_MOVED is sent again every `RETRY_FIRST_NS`, doubling to `RETRY_MAX_NS` (an
old home that is down is dialled that rarely), for at most `DEBT_KEEP_NS`; after that the old
home's registration expires by itself. A debt outlives the group here (the group may end, or move
on again, before the old home is back), and is the broker's memory only: a debt of a broker that is
killed in turn is lost (the old home's registration then waits for `durable_expiry_ns`). At most
`DEBTS_MAX` are kept; a debt past it is dropped (counted: `dropped`).

A plain data structure with one `Deadlines` (the retries): `now` is an argument; `due` gives the
SHARE_MOVEDs to send again, with the address of each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from tidings.core.deadlines import Deadlines
from tidings.core.durable.checkpoint import Home
from tidings.core.share.wire import GroupKey, ShareMoved
from tidings.core.units import SECOND_NS

RETRY_FIRST_NS = SECOND_NS  # SHARE_MOVED is sent again this long after the first time, then twice as long each time
RETRY_MAX_NS = 60 * SECOND_NS  # the longest wait between two SHARE_MOVEDs
DEBT_KEEP_NS = 24 * 3600 * SECOND_NS  # an old home not answering for this long is not asked again
DEBTS_MAX = 10_000  # old homes owed a SHARE_MOVED at once

Owed = tuple[str, int]  # the old home's (pubend, registration)


class Retry(NamedTuple):
    owed: Owed


@dataclass(slots=True)
class Debt:
    group: GroupKey
    address: str  # the old home's
    taken: bool  # the group is homed here now (else: a JOIN without members named the old home)
    since_ns: int
    wait_ns: int  # until the next SHARE_MOVED after the one due now


class Handover:
    def __init__(self) -> None:
        self.debts: dict[Owed, Debt] = {}
        self.done: dict[Owed, None] = {}  # debts not `taken` that were answered, oldest first
        self.timers: Deadlines[Retry] = Deadlines()
        self.told = self.settled_total = self.dropped = 0  # figures: old homes told, answered, not kept

    def owe(self, now: int, me: str, group: GroupKey, old: Home, taken: bool = True) -> list[tuple[str, ShareMoved]]:
        """The group homed here (at `me`: `taken`) started from a position of `old`, or a JOIN
        without members named it (not `taken`): tell it (once per debt)."""
        owed = (old.pubend, old.registration)
        debt = self.debts.get(owed)
        if debt is not None and (debt.taken or not taken):
            return []
        if debt is None and ((not taken and owed in self.done) or len(self.debts) >= DEBTS_MAX):
            self.dropped += owed not in self.done
            return []
        self.debts[owed] = Debt(group, old.address, taken, now, min(2 * RETRY_FIRST_NS, RETRY_MAX_NS))
        self.timers.set(Retry(owed), now + RETRY_FIRST_NS)
        self.told += 1
        return [(old.address, ShareMoved(group, me, *owed, taken))]

    def settled(self, pubend: str, registration: int) -> None:
        """SHARE_LEFT: the old home stopped the group and forgot the registration."""
        debt = self.debts.pop((pubend, registration), None)
        if debt is not None:
            self.settled_total += 1
            self.timers.cancel(Retry((pubend, registration)))
            if not debt.taken:
                self.done[(pubend, registration)] = None
                if len(self.done) > DEBTS_MAX:
                    del self.done[next(iter(self.done))]

    def due(self, now: int, me: str) -> list[tuple[str, ShareMoved]]:
        """The SHARE_MOVEDs due again (a debt older than DEBT_KEEP_NS is dropped instead)."""
        out: list[tuple[str, ShareMoved]] = []
        for timer in self.timers.pop_due(now):
            debt = self.debts.get(timer.owed)
            if debt is None:
                continue
            if now - debt.since_ns >= DEBT_KEEP_NS:
                del self.debts[timer.owed]
                self.dropped += 1
                continue
            out.append((debt.address, ShareMoved(debt.group, me, *timer.owed, debt.taken)))
            self.timers.set(timer, now + debt.wait_ns)
            debt.wait_ns = min(2 * debt.wait_ns, RETRY_MAX_NS)
        return out

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()
