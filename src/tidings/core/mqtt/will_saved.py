"""A will waiting for its Will Delay Interval, kept through a restart of its broker (kill -9 included).

Theory of operation. core/mqtt/will.py holds a will that waits (`Waiting`) with its ended connection,
in the broker's memory. This module keeps what a restart needs of it in the broker's `mqtt.state`
(core/mqtt/exactly_once.py's save, a fifth row): per (service, client id), the identity the client
was admitted as, the wall time the will is due (microseconds since the epoch: the end of its
connection plus the lesser of its Will Delay and Session Expiry Intervals), and the will as the event
it becomes (channel, attributes, payload: checked by the client's rules when it was made). A will
is written when it starts waiting (`held`), and leaves when it is published or cancelled (`drop`);
nothing waits for the save (a kill -9 within one save of the connection's end loses the will).

After a restart the broker has no connection to publish a saved will on, so it opens one of its own
for it (`Due`): a connection vouched for as the client's identity (core/auth/guard.py `vouched`, as a
shared group's home does: the broker admitted that identity before the restart), which publishes the
event (the intake logs it and the identity's publish rules are checked again) and ends. Until the
will is due, a connection with the same client id and service cancels it (`cancel`), or, starting
clean, publishes it at once (3.1.2.5), as for a will waiting with its connection.

A plain data structure (no I/O, no time of its own): the gateway (core/mqtt/gateway.py) owns one per
broker and times the earliest due will with one timer.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from tidings.core.event import AttrValue

WILLS_SAVED_BYTES_MAX: Final = 16 << 20  # payloads of the wills kept; past it a will is not kept (lost in a restart)
US_PER_NS: Final = 1_000

SessionKey = tuple[str, str]  # (service, client id)


class SavedWill(NamedTuple):
    identity: str
    due_us: int  # wall time, microseconds since the epoch
    channel: str
    attributes: dict[str, AttrValue]
    payload: bytes


class SavedWills:
    """The wills waiting, by (service, client id): those of this run's connections and the restored."""

    __slots__ = ("bytes", "changed", "restored", "wills")

    def __init__(self, rows: object = None) -> None:
        """`rows`: what `rows()` gave at the last save (anything else reads as none); each read back is
        `restored`: no connection of this run holds it, so it is published by the broker's own."""
        self.wills: dict[SessionKey, SavedWill] = {}
        self.restored: set[SessionKey] = set()
        self.bytes = 0
        self.changed = False  # since the last `rows()`
        for row in rows if isinstance(rows, list) else ():
            try:
                service, client_id, identity, due_us, channel, attributes, payload = row
                will = SavedWill(str(identity), int(due_us), str(channel), dict(attributes), bytes(payload))
            except (TypeError, ValueError):
                continue
            self.wills[(str(service), str(client_id))] = will
            self.restored.add((str(service), str(client_id)))
            self.bytes += len(will.payload)

    def held(self, key: SessionKey, will: SavedWill) -> None:
        """A will starts waiting (its connection ended at wall time due_us - delay)."""
        self.drop(key)
        if self.bytes + len(will.payload) > WILLS_SAVED_BYTES_MAX:
            return
        self.wills[key] = will
        self.bytes += len(will.payload)
        self.changed = True

    def drop(self, key: SessionKey) -> SavedWill | None:
        """The will of `key` published or cancelled: not kept any more."""
        will = self.wills.pop(key, None)
        self.restored.discard(key)
        if will is not None:
            self.bytes -= len(will.payload)
            self.changed = True
        return will

    def next_us(self) -> int | None:
        """When the earliest restored will is due (wall microseconds)."""
        return min((self.wills[k].due_us for k in self.restored), default=None)

    def due(self, wall_us: int) -> list[tuple[SessionKey, SavedWill]]:
        """The restored wills due at `wall_us`, taken out, to publish."""
        keys = sorted(k for k in self.restored if self.wills[k].due_us <= wall_us)
        return [(k, will) for k in keys if (will := self.drop(k)) is not None]

    def rows(self) -> list[list[object]]:
        self.changed = False
        return [[s, c, w.identity, w.due_us, w.channel, w.attributes, w.payload] for (s, c), w in self.wills.items()]

    def status(self) -> dict[str, int]:
        return {"wills_saved": len(self.wills), "wills_restored": len(self.restored)}
