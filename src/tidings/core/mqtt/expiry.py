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

A plain data structure (no I/O): the gateway owns one per broker, inside its `QosTwoKeys`.
"""

from __future__ import annotations

from typing import Final

from tidings.core.mqtt.effects import SESSION_NEVER_EXPIRES

US_PER_S: Final = 1_000_000
AWAY_SESSIONS_MAX: Final = 100_000  # deadlines held; past it the earliest end now (a bound on the saved state)

SessionKey = tuple[str, str]  # (service, client id)


class SessionExpiries:
    """The deadlines of persistent sessions away, by (service, client id)."""

    __slots__ = ("away", "changed")

    def __init__(self, rows: object = None) -> None:
        """`rows`: what `rows()` gave at the last save (anything else reads as none)."""
        self.away: dict[SessionKey, int] = {}  # -> deadline, wall microseconds
        self.changed = False  # since the last `rows()`
        if isinstance(rows, list):
            for row in rows:
                if (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str) and isinstance(row[1], str)
                        and isinstance(row[2], int)):
                    self.away[(row[0], row[1])] = row[2]

    def left(self, key: SessionKey, interval_s: int, wall_us: int) -> None:
        """The session's connection ended at `wall_us` with `interval_s` its Session Expiry Interval."""
        if interval_s >= SESSION_NEVER_EXPIRES:
            self.back(key)
            return
        self.away.pop(key, None)
        self.away[key] = wall_us + interval_s * US_PER_S
        self.changed = True
        while len(self.away) > AWAY_SESSIONS_MAX:  # (ended at the next look)
            earliest = min(self.away, key=self.away.__getitem__)
            self.away[earliest] = 0

    def back(self, key: SessionKey) -> None:
        """A connection of the session's client id: the session is not away any more."""
        if self.away.pop(key, None) is not None:
            self.changed = True

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
        return [[service, client_id, deadline] for (service, client_id), deadline in self.away.items()]
