"""Session Expiry (MQTT 5.0, 3.1.2.11.2): a persistent session whose client is gone ends when its
Session Expiry Interval runs out.

Theory of operation. When a persistent session's connection ends and nobody took its client id over,
the gateway (core/mqtt/gateway.py) records its deadline here: the wall time (microseconds since the
epoch) of the end plus the interval the client last set (at CONNECT, or on a 5.0 DISCONNECT, which
may lower it to 0: the session then ends at once). An interval of 0xFFFFFFFF (and every 3.1.1
Clean Session 0 session) never expires here: its subscriptions are kept for `durable_expiry_ns`, as
any broker-held durable subscription away. A connection with the same client id (under the same
service) takes the deadline back (`back`). When the deadline passes (`due`), the gateway ends the
session: its durable subscriptions are forgotten, its QoS 2 keys and what it had in flight dropped.

The deadlines are wall time, not the runtime's monotonic clock, because they outlive the process:
they are saved with the QoS 2 keys in the broker's `mqtt.state` (core/mqtt/exactly_once.py's
`SaveMqttState`, a third row of the same msgpack value), so a session away when its broker is
killed -9 still ends on time after the restart (a deadline that passed while the broker was down
ends the session at the first look). The gateway keeps one timer (`ExpiryTimer`, in its one
`Deadlines`) at the earliest deadline.

The same record says which persistent sessions exist, for CONNACK's Session Present (3.2.2.1.2: a
client told 0 discards its session state, its QoS 1 and 2 PUBLISHes not yet answered with it). A
session exists while it is away with a deadline, and also while it is connected (`present`, with
its interval) or away without a deadline (3.1.1, 0xFFFFFFFF: `present` too): so a session without
subscriptions, such as a publisher's, is known after a reconnect and after a kill -9. The present
ones are saved as rows with no deadline (-1) and their interval; after a restart their connections
are gone, so `restarted` turns them into sessions away from the first wall time known.

A plain data structure (no I/O): the gateway owns one per broker, inside its `QosTwoKeys`.
"""

from __future__ import annotations

from typing import Final

from tidings.core.mqtt.effects import SESSION_NEVER_EXPIRES

US_PER_S: Final = 1_000_000
AWAY_SESSIONS_MAX: Final = 100_000  # deadlines held; past it the earliest end now (a bound on the saved state)

SessionKey = tuple[str, str]  # (service, client id)


class SessionExpiries:
    """The persistent sessions the broker holds, by (service, client id), and the deadlines of those away."""

    __slots__ = ("away", "changed", "present", "restored")

    def __init__(self, rows: object = None) -> None:
        """`rows`: what `rows()` gave at the last save (anything else reads as none)."""
        self.away: dict[SessionKey, int] = {}  # -> deadline, wall microseconds
        self.present: dict[SessionKey, int] = {}  # sessions without a deadline -> their interval, seconds
        self.restored: dict[SessionKey, int] = {}  # present at the last save, before a restart: `restarted`
        self.changed = False  # since the last `rows()`
        if isinstance(rows, list):
            for row in rows:
                if not (isinstance(row, list) and len(row) in (3, 4) and isinstance(row[0], str)
                        and isinstance(row[1], str) and all(isinstance(v, int) for v in row[2:])):
                    continue
                if len(row) == 3:
                    self.away[(row[0], row[1])] = row[2]
                elif row[3] >= SESSION_NEVER_EXPIRES:
                    self.present[(row[0], row[1])] = row[3]
                else:
                    self.restored[(row[0], row[1])] = row[3]

    def left(self, key: SessionKey, interval_s: int, wall_us: int) -> None:
        """The session's connection ended at `wall_us` with `interval_s` its Session Expiry Interval."""
        if interval_s >= SESSION_NEVER_EXPIRES:
            self.back(key, interval_s)
            return
        self.present.pop(key, None)
        self.away.pop(key, None)
        self.away[key] = wall_us + interval_s * US_PER_S
        self.changed = True
        self._bound()

    def back(self, key: SessionKey, interval_s: int | None) -> None:
        """A connection of the session's client id: the session is not away any more; it goes on
        with `interval_s` (None: it is not persistent, and ends with its connection)."""
        if self.away.pop(key, None) is not None or self.restored.pop(key, None) is not None:
            self.changed = True
        if interval_s is None:
            self.changed = self.present.pop(key, None) is not None or self.changed
        elif self.present.get(key) != interval_s:
            self.present[key] = interval_s
            self.changed = True
            self._bound()

    def known(self, key: SessionKey) -> bool:
        """Whether the broker holds the persistent session `key` (CONNACK's Session Present)."""
        return key in self.away or key in self.present or key in self.restored

    def restarted(self, wall_us: int) -> None:
        """The first wall time known after a restart: the sessions connected at the last save lost
        their connections with the broker, so their expiry runs from now."""
        for key, interval_s in self.restored.items():
            self.away[key] = wall_us + interval_s * US_PER_S
        self.changed = self.changed or bool(self.restored)
        self.restored = {}
        self._bound()

    def _bound(self) -> None:
        """At most AWAY_SESSIONS_MAX sessions: past it the earliest deadlines end at the next look,
        and where none is left to end, the oldest sessions without one are forgotten."""
        excess = len(self.away) + len(self.present) - AWAY_SESSIONS_MAX
        if excess <= 0:
            return
        for key in sorted(self.away, key=self.away.__getitem__)[:excess]:
            self.away[key] = 0
        for key in list(self.present)[:excess - len(self.away)]:
            del self.present[key]

    def next_us(self) -> int | None:
        """The earliest deadline (wall microseconds), None when no session is away with one."""
        return min(self.away.values()) if self.away else None

    def due(self, wall_us: int) -> list[SessionKey]:
        """The sessions whose deadline is at or before `wall_us`: taken out, to be ended."""
        ended = sorted(key for key, deadline in self.away.items() if deadline <= wall_us)
        for key in ended:
            del self.away[key]
        self.changed = self.changed or bool(ended)
        return ended

    def rows(self) -> list[list[object]]:
        """The deadlines, as saved (`SessionExpiries(rows)` reads them back)."""
        self.changed = False
        return [*([service, client_id, deadline] for (service, client_id), deadline in self.away.items()),
                *([service, client_id, -1, interval] for (service, client_id), interval
                  in (*self.present.items(), *self.restored.items()))]
