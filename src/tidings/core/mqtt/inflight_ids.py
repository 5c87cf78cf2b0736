"""A persistent session's deliveries in flight keep their packet identifiers through a kill -9 of its
broker (MQTT 4.4: resent with their original identifiers, a PUBLISH with DUP or a PUBREL).

Theory of operation. core/mqtt/resumption.py carries a session's unfinished deliveries from one
connection to the next in the broker's memory; this module keeps what a restart needs of them on disk:
per session (service, client id), each delivery in flight as a `Record`: its place (the subscription's
filter, the event's pubend and tick), its packet identifier, and whether the client sent PUBREC (a
PUBREL is then what is resent). No payload is kept: after a restart the session's durable subscription
delivers those events again from its saved position (they were not acknowledged), and each one whose
place a record names is sent under the record's identifier, with DUP, or as its PUBREL
(`SessionIds.claim`). Until then the identifiers are reserved: no new delivery takes them.

The records ride in the broker's `mqtt.state` (core/mqtt/exactly_once.py's save, a fourth row), taken
from the live connections at each save (`records_of`), so the hot path keeps no book of its own: the
protocol machine counts its moves (inflight.py's `Deliveries.moves`, `moves2`), and the gateway looks
at those counters after each turn of a persistent session's (`DurableIds.moved`):

- a QoS 2 PUBLISH sent or a PUBREL due (`moves2`): what the session sends waits until a save taken
  after it is on disk (`hold`, `release`), because the client's store of identifiers (4.3.3) decides
  exactly once: a QoS 2 message resent under another identifier is delivered twice, and a new one
  under an identifier the client still holds is lost. The wait is one save (its fsyncs), grouped as
  the PUBCOMPs' are: every session's sends of the turn wait for the same save;
- a QoS 1 delivery sent or ended (`moves`): nothing waits; the records are saved within
  `IDS_SAVE_INTERVAL_NS` (as the durable position is, `durable_save_interval_ns`), so a QoS 1 delivery
  sent less than that before a kill -9 may come again under a new identifier without DUP (QoS 1 is
  at least once either way: the client keeps no state for it once it has sent PUBACK).

A delivery finished (PUBACK, PUBCOMP) leaves the records at the next save; its event may still come
again after a kill -9 when the durable position had not been saved past it (the position's own
interval): a record still naming it resends it (DUP, or PUBREL: the client answers PUBCOMP), one gone
sends it as new (at least once). A record whose event does not come again (the position had passed
it) is dropped once a later event of its stream comes (`SessionIds.claim`), or with its session.

A plain data structure (no I/O): the gateway (core/mqtt/gateway.py) owns one `DurableIds` per broker,
each persistent connection a `SessionIds`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from tidings.core.effects import Disconnect, Effect, Send
from tidings.core.mqtt.delivery import Plain
from tidings.core.mqtt.effects import MqttEffect
from tidings.core.mqtt.inflight import Deliveries, DeliveryState
from tidings.core.mqtt.packets import Publish

if TYPE_CHECKING:
    from tidings.core.mqtt.gateway import MqttGateway
    from tidings.core.mqtt.resumption import Carried
    from tidings.core.mqtt.session import MqttSession

IDS_SAVE_INTERVAL_NS: Final = 250_000_000  # QoS 1 records saved at most this long after they change
IDS_AWAY_MAX: Final = 100_000  # records kept for sessions away; past it the oldest sessions' go (new ids)

Place = tuple[str, str, int]  # (filter, pubend, tick): a delivery's place (resumption.Key)
Record = tuple[Place, int, bool]  # (place, packet id, released)
SessionKey = tuple[str, str]  # (service, client id)


def records_of(session: MqttSession) -> list[Record]:
    """A persistent connection's deliveries in flight with a place, and its records not claimed yet."""
    out: list[Record] = []
    tokens, resumed = session.tokens, session.resumed.keys
    for pid, d in session.machine.deliveries.in_flight.items():
        tag = tokens.get(d.token)
        place = (tag[0].filter, tag[1].pubend, tag[1].tick) if tag is not None else resumed.get(d.token)
        if place is not None:
            out.append((place, pid, d.state is DeliveryState.AWAITING_PUBCOMP))
    if session.ids is not None:
        out += [(place, pid, released) for place, (pid, released) in session.ids.pending.items()]
    return out


def live_records(gateway: MqttGateway) -> list[tuple[SessionKey, list[Record]]]:
    """The records of the persistent sessions connected (each its client id's current connection)."""
    return [((s.native.service, s.client_id), records_of(s)) for s in gateway.sessions.values()
            if s.ids is not None and s.native is not None and gateway.by_client_id.get(s.client_id) == s.conn]


def opened(session: MqttSession, carried: list[Carried]) -> SessionIds | None:
    """A connection admitted (WELCOME): a persistent session's records from before, its packet ids
    reserved (a clean start drops them); None for a session that is not persistent."""
    store, native = session.durable_ids, session.native
    if store is None or native is None:
        return None
    records = store.take((native.service, session.client_id))
    if not session.persistent:
        return None
    return SessionIds([] if session.clean_start else records, session.machine.deliveries, {c.key for c in carried})


def resume_saved(session: MqttSession, items: list[tuple[int, Publish | Plain]], out: list[Effect]
                 ) -> list[tuple[int, Publish | Plain]]:
    """The deliveries whose place a record names, resent under its packet id (DUP, or PUBREL); the
    others, for the session to deliver."""
    ids, tokens = session.ids, session.tokens
    assert ids is not None
    rest: list[tuple[int, Publish | Plain]] = []
    effects: list[MqttEffect] = []
    for token, publish in items:
        tag = tokens.get(token)
        hit = None if tag is None else ids.claim((tag[0].filter, tag[1].pubend, tag[1].tick))
        if hit is None:
            rest.append((token, publish))
            continue
        m = Publish(*publish) if isinstance(publish, tuple) else publish
        effects += session.machine.resume(token, hit[0], m.topic, m.payload, m.qos, m.retain, m.properties, hit[1])
    session._apply(effects, out, [])
    return rest


class SessionIds:
    """One persistent connection's records from before (claimed as their events come again) and the
    machine's move counters last seen."""

    __slots__ = ("deliveries", "moves", "moves2", "pending", "streams")

    def __init__(self, records: list[Record], deliveries: Deliveries, skip: set[Place]) -> None:
        """`records`: the session's, from its last connection or the saved state; `skip`: the places
        resent already (core/mqtt/resumption.py's carried deliveries)."""
        self.deliveries = deliveries
        self.pending: dict[Place, tuple[int, bool]] = {}
        self.streams: dict[tuple[str, str], list[int]] = {}  # (filter, pubend) -> ticks pending
        for place, pid, released in records:
            if place not in skip and place not in self.pending:
                self.pending[place] = (pid, released)
                self.streams.setdefault(place[:2], []).append(place[2])
        deliveries.reserve([pid for pid, _ in self.pending.values()])
        self.moves, self.moves2 = deliveries.moves, deliveries.moves2

    def claim(self, place: Place) -> tuple[int, bool] | None:
        """The (packet id, released) a delivery at `place` is resent under, if a record names it; the
        records of its stream before it are dropped (the position had passed them)."""
        ticks = self.streams.get(place[:2])
        if ticks is None:
            return None
        hit = self.pending.pop(place, None)
        for tick in [t for t in ticks if t <= place[2]]:
            ticks.remove(tick)
            if tick != place[2]:
                pid, _ = self.pending.pop((*place[:2], tick))
                self.deliveries.ids.free(pid)
        if not ticks:
            del self.streams[place[:2]]
        if hit is not None:
            self.deliveries.ids.free(hit[0])  # (`resume` takes it again)
        return hit


class DurableIds:
    """The broker's records of sessions away, and the sends held for a save."""

    __slots__ = ("away", "dirty", "held", "holding", "last_save", "saved_records", "saving_records")

    def __init__(self, rows: object = None) -> None:
        """`rows`: what `rows()` gave at the last save (anything else reads as none)."""
        self.away: dict[SessionKey, list[Record]] = {}
        self.holding: dict[int, int] = {}  # conn -> the state version its sends wait for
        self.held: dict[int, list[bytes]] = {}
        self.dirty = False  # QoS 1 records changed since the last save
        self.last_save = 0  # `now` of the last save taken
        self.saving_records = self.saved_records = 0
        for row in rows if isinstance(rows, list) else ():
            try:
                service, client_id, records = row
                self.away[(str(service), str(client_id))] = [
                    ((str(f), str(pubend), int(tick)), int(pid), bool(released))
                    for (f, pubend, tick), pid, released in records]
            except (TypeError, ValueError):
                continue

    def take(self, key: SessionKey) -> list[Record]:
        """A session's records (its connection is back, starts clean, or ends)."""
        records = self.away.pop(key, [])
        self.dirty = self.dirty or bool(records)
        return records

    def left(self, key: SessionKey, records: list[Record]) -> None:
        """A persistent session's connection ended: its records wait for its next one."""
        self.away.pop(key, None)
        if records:
            self.away[key] = records
        while sum(len(r) for r in self.away.values()) > IDS_AWAY_MAX:
            del self.away[next(iter(self.away))]

    def moved(self, conn: int, ids: SessionIds, version: int) -> bool:
        """After a turn of a persistent connection's: whether its sends must wait for a save of
        `version` (a QoS 2 move); a QoS 1 move only marks the records for the next save."""
        deliveries = ids.deliveries
        if deliveries.moves == ids.moves:
            return False
        ids.moves = deliveries.moves
        if deliveries.moves2 == ids.moves2:
            self.dirty = True
            return False
        ids.moves2 = deliveries.moves2
        self.holding[conn] = version
        return True

    def due(self, now: int) -> bool:
        """Whether the QoS 1 records are to be saved now."""
        return self.dirty and now >= self.last_save + IDS_SAVE_INTERVAL_NS

    def rows(self, live: list[tuple[SessionKey, list[Record]]], now: int) -> list[list[object]]:
        """The records to save: the live persistent connections' and the sessions' away."""
        self.dirty, self.last_save = False, now
        rows: list[list[object]] = []
        self.saving_records = 0
        for (service, client_id), records in [*live, *self.away.items()]:
            if records:
                rows.append([service, client_id, [[list(place), pid, released] for place, pid, released in records]])
                self.saving_records += len(records)
        return rows

    def hold(self, out: list[Effect]) -> list[Effect]:
        """`out` with the holding connections' Sends kept back (a Disconnect lets them go first)."""
        kept: list[Effect] = []
        for eff in out:
            conn = getattr(eff, "conn", None)
            if conn in self.holding:
                if type(eff) is Send:
                    self.held.setdefault(eff.conn, []).append(eff.data)
                    continue
                if type(eff) is Disconnect:
                    self._free(eff.conn, kept)
            kept.append(eff)
        return kept

    def release(self, saved: int) -> list[Effect]:
        """The sends whose save is now on disk."""
        out: list[Effect] = []
        for conn in [c for c, version in self.holding.items() if version <= saved]:
            self._free(conn, out)
        return out

    def _free(self, conn: int, out: list[Effect]) -> None:
        del self.holding[conn]
        data = self.held.pop(conn, None)
        if data:
            out.append(Send(conn, b"".join(data)))

    def gone(self, conn: int) -> None:
        """The connection ended: what it held back is not sent."""
        self.holding.pop(conn, None)
        self.held.pop(conn, None)

    def status(self) -> dict[str, int]:
        return {"ids_sessions_away": len(self.away), "ids_saved_records": self.saved_records,
                "ids_sends_held": len(self.holding)}
