"""QoS 2 from a persistent session's client, exactly once through a kill -9 of its broker: the
packet identifiers awaiting PUBREL, kept as idempotent publish keys in the log (core/publish/dedup.py)
and the releases in a small saved state.

Theory of operation. The spec's receiver (4.3.3, method B) stores a QoS 2 PUBLISH's packet identifier
from the PUBLISH until its PUBREL: a PUBLISH with that identifier meanwhile is the same message (not
delivered again), after the PUBREL it is a new one. A broker that forgets the set in a kill -9 logs
a retried PUBLISH twice (its first copy was logged, the PUBREC lost); one that keeps an identifier
past its PUBREL takes the client's next message under it for the old one and loses it. So the set
must be durable exactly as the log is, and the release before the PUBCOMP goes (the client reuses the
identifier once it has the PUBCOMP, 2.2.1).

Each use of an identifier gets a key, `pseq = generation << 16 | packet id`, under the producer
`mqtt:CLIENT_ID` scoped by the client's service (the dedup window's `scoped`): the event is logged
with it, atomically with the event itself, so a retry with the same key is answered with the
original's tick and not logged again (the intake's idempotent publish, the same group commit). The
generation is the session's counter, raised at each new use, so a reused identifier is a new key.
What the log cannot say is the release: that is the saved state, one entry per session with its
counter N at the save and the keys then held; a PUBCOMP waits until a save taken after its PUBREL
is on disk (`version` / `saved`, the runtime's `SaveMqttState` and its completion).

After a restart a session's keys are, once (`open`): the saved ones, and every key of the producer
still in the dedup window whose generation is N or above (logged after the save, so never released:
its release would have been saved before its PUBCOMP). The counter resumes above both. A session
absent from the saved state reads as N = 0. A clean start, or a session that is not persistent,
forgets the keys (`clear`) before its CONNACK, saved first for the same reason.

The same saved state carries the deadlines of the persistent sessions away (core/mqtt/expiry.py,
a third row): nothing waits for their save, so they take no version of their own.

The guarantee holds while a key is in the dedup window (`dedup_window_ns`, 10 minutes, and its
caps): a retry later than that is logged again, as a native idempotent publish would be.

A plain data structure (no I/O): the gateway (core/mqtt/gateway.py) owns one per broker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import msgpack

from tidings.core.mqtt.effects import MqttEffect
from tidings.core.mqtt.expiry import SessionExpiries
from tidings.core.mqtt.properties import Properties
from tidings.core.mqtt.protocol import MqttConnection
from tidings.core.publish.dedup import PRODUCER_BYTES_MAX, DedupWindow, scoped
from tidings.core.session.client_session import PublishEvent

PID_BITS: Final = 16
PID_MASK: Final = (1 << PID_BITS) - 1
PRODUCER_PREFIX: Final = "mqtt:"
STATE_FORMAT: Final = 1


def producer_of(client_id: str) -> str:
    """The producer id of a client's QoS 2 PUBLISHes (the intake scopes it by the client's service)."""
    producer = PRODUCER_PREFIX + client_id
    if len(producer.encode("utf-8")) > PRODUCER_BYTES_MAX:  # a client id of over 251 bytes: cut at a char
        producer = producer.encode("utf-8")[:PRODUCER_BYTES_MAX].decode("utf-8", "ignore")
    return producer


@dataclass(frozen=True, slots=True)
class SaveMqttState:
    """For the runtime: replace the saved state (the data directory's `mqtt.state`) with `data`
    atomically, then hand the gateway `MqttStateSaved(version)`."""

    version: int
    data: bytes


@dataclass(frozen=True, slots=True)
class MqttStateSaved:
    """Input: the state `version` is on disk."""

    now: int
    version: int


@dataclass(slots=True)
class SessionKeys:
    """One session's keys: the current use of each packet identifier, and the generation counter."""

    counter: int = 0  # the next use's generation
    keys: dict[int, int] = field(default_factory=dict)  # packet id -> pseq, from its PUBLISH to its PUBREL
    last_us: int = 0  # wall time of its last new key (a session idle past the window may be dropped)


class QosTwoKeys:
    """The persistent sessions' QoS 2 keys at one broker, and the saves their releases wait for."""

    def __init__(self, dedup: DedupWindow, saved: bytes | None = None) -> None:
        """`dedup`: the broker's idempotent publish window; `saved`: the state saved last (None: none)."""
        self.dedup = dedup
        self.sessions: dict[str, SessionKeys] = {}  # opened this run, by producer
        self.saved_state: dict[str, SessionKeys] = self._decode(saved)  # not yet opened this run
        self.expiries = SessionExpiries(row_of(saved, 2))  # sessions away: saved with the keys (core/mqtt/expiry.py)
        self.version = 0  # raised by each change a PUBCOMP or CONNACK may wait for
        self.saved = 0  # the version on disk
        self.saving: int | None = None  # the version being saved
        self.saves = 0

    @staticmethod
    def _decode(data: bytes | None) -> dict[str, SessionKeys]:
        """The saved sessions (a state that does not decode reads as none: the log still has the keys
        logged since, and a session without a saved entry reads as N = 0)."""
        if not data:
            return {}
        try:
            value = msgpack.unpackb(data, strict_map_key=False)
            assert value[0] == STATE_FORMAT
            return {str(prod): SessionKeys(int(counter), {int(k): int(v) for k, v in keys.items()}, int(last_us))
                    for prod, counter, last_us, keys in value[1]}
        except Exception:
            return {}

    def open(self, producer: str, now_us: int) -> SessionKeys:
        """The session of (scoped) `producer`, its keys rebuilt the first time this run (module doc):
        the saved ones and the dedup window's of generation N and above."""
        keys = self.sessions.get(producer)
        if keys is not None:
            return keys
        keys = self.saved_state.pop(producer, None) or SessionKeys()
        counter = keys.counter
        keys.last_us = max(keys.last_us, now_us)
        generations: dict[int, int] = {}
        for pseq in self.dedup.pseqs(producer):
            generation, pid = pseq >> PID_BITS, pseq & PID_MASK
            keys.counter = max(keys.counter, generation + 1)
            if generation >= counter and generation >= generations.get(pid, -1):
                generations[pid] = generation
                keys.keys[pid] = pseq
        self.sessions[producer] = keys
        return keys

    def key(self, producer: str, pid: int, now_us: int) -> int:
        """The pseq of a QoS 2 PUBLISH `pid`: its use's key (a retry's is the first's), new if none."""
        keys = self.open(producer, now_us)  # (opened at the CONNECT; again if a save pruned it idle)
        pseq = keys.keys.get(pid)
        if pseq is None:
            pseq = keys.keys[pid] = keys.counter << PID_BITS | pid
            keys.counter += 1
            keys.last_us = now_us
        return pseq

    def logged(self, producer: str) -> list[int]:
        """The packet identifiers whose key is logged (in the dedup window): PUBREL awaited."""
        lookup, keys = self.dedup.lookup, self.sessions.get(producer)
        held = {} if keys is None else keys.keys
        return sorted(pid for pid, pseq in held.items() if lookup(producer, pseq) is not None)

    def release(self, producer: str, pid: int) -> int:
        """PUBREL `pid`: its key goes; the version its PUBCOMP waits for (a PUBREL of an identifier
        not held waits for what is being saved all the same: a release of a past connection may be)."""
        keys = self.sessions.get(producer)
        if keys is not None and keys.keys.pop(pid, None) is not None:
            self.version += 1
        return self.version

    def clear(self, producer: str, now_us: int) -> int:
        """A new session under `producer` (Clean Start, or not persistent): its keys go. The version
        the CONNACK waits for (the current one when nothing changed). A producer of which nothing is
        known (a client that never had a persistent session here: no saved entry, no key logged) is
        not opened, so clean sessions cost nothing here."""
        if producer not in self.sessions and producer not in self.saved_state and not self.dedup.pseqs(producer):
            return self.version
        keys = self.open(producer, now_us)
        if keys.keys:
            keys.keys.clear()
            self.version += 1
        return self.version

    # ---- the saved state -------------------------------------------------------------------------

    def take_save(self, now_us: int, more_rows: Callable[[], list[object]] = list,
                  more_due: bool = False) -> SaveMqttState | None:
        """The state to save when a change waits for it (or a session expiry changed, or `more_due`: the
        rows `more_rows` gives, which every save carries after the expiries: the deliveries' packet ids,
        core/mqtt/inflight_ids.py, and the wills waiting, will_saved.py; nothing waits for those, so
        they take no new version) and no save is under way."""
        if self.saving is not None or (self.saved >= self.version and not self.expiries.changed and not more_due):
            return None
        horizon = now_us - 2 * self.dedup.window_us  # (a key's tick comes a little after its last_us)
        for held in (self.sessions, self.saved_state):
            for producer in [p for p, k in held.items() if not k.keys and k.last_us < horizon]:
                del held[producer]  # nothing of it left in the dedup window: N no longer matters
        rows = [[p, k.counter, k.last_us, k.keys] for held in (self.sessions, self.saved_state)
                for p, k in held.items()]
        self.saving = self.version
        self.saves += 1
        return SaveMqttState(self.version, msgpack.packb([STATE_FORMAT, rows, self.expiries.rows(), *more_rows()]))

    def done(self, version: int) -> None:
        """The runtime saved `version` (on disk)."""
        if self.saving == version:
            self.saving = None
        self.saved = max(self.saved, version)

    def status(self) -> dict[str, int]:
        return {"qos2_sessions": len(self.sessions), "qos2_keys_held": sum(len(k.keys) for k in self.sessions.values()),
                "qos2_saves": self.saves}


def row_of(data: bytes | None, index: int) -> object:
    """A row of the saved state: 2 the session expiries, 3 the deliveries' packet ids, 4 the wills
    waiting (None in a state saved before they were)."""
    try:
        value = msgpack.unpackb(data, strict_map_key=False) if data else None
    except Exception:
        return None
    return value[index] if isinstance(value, list) and len(value) > index else None


class ConnectionKeys:
    """One MQTT connection's side of `QosTwoKeys`: its QoS 2 events keyed (a persistent session's),
    its releases and its CONNACK held until what they changed is saved."""

    __slots__ = ("connack", "keyed", "keys", "producer", "releasing", "scoped", "version")

    def __init__(self, keys: QosTwoKeys, service: str, client_id: str, persistent: bool, clean_start: bool,
                 now_us: int, connack: tuple[bool, Properties]) -> None:
        """`connack`: the accept's (session present, properties), held until `version` is saved."""
        self.keys = keys
        self.connack: tuple[bool, Properties] | None = connack
        self.producer = producer_of(client_id)
        self.scoped = scoped(service, self.producer)
        self.keyed = persistent
        self.releasing: list[tuple[int, int, bool]] = []  # (version, packet id, known), PUBCOMP awaited
        if persistent and not clean_start:
            keys.open(self.scoped, now_us)
            self.version = keys.saved  # (nothing to wait for)
        else:
            self.version = keys.clear(self.scoped, now_us)  # the CONNACK waits for it
            if persistent:
                keys.open(self.scoped, now_us)

    def waiting(self) -> bool:
        """Whether a PUBCOMP (or the CONNACK, `MqttSession.connack`) waits for a save."""
        return bool(self.releasing) or self.version > self.keys.saved

    def awaiting_release(self) -> list[int]:
        """The session's QoS 2 identifiers logged and not released (the machine's `accept`)."""
        return self.keys.logged(self.scoped) if self.keyed else []

    def event(self, event: PublishEvent, qos: int, packet_id: int | None, now_us: int) -> PublishEvent:
        """`event` keyed when it is a persistent session's QoS 2 PUBLISH."""
        if qos != 2 or packet_id is None or not self.keyed:
            return event
        return (*event[:3], self.keys.key(self.scoped, packet_id, now_us), self.producer)

    def due(self, machine: MqttConnection, now: int) -> list[MqttEffect]:
        """The machine's CONNACK and PUBCOMPs whose save is done."""
        out: list[MqttEffect] = []
        if self.connack is not None and self.version <= self.keys.saved:
            (session_present, offer), self.connack = self.connack, None
            out += machine.accept(now, session_present, offer, self.awaiting_release())
        for packet_id, known in self.released() if self.releasing else ():
            out += machine.release_done(packet_id, known)
        return out

    def pubrel(self, packet_id: int, known: bool, machine: MqttConnection, now: int) -> list[MqttEffect]:
        """PUBREL: its release, and what is now due (its PUBCOMP at once where nothing waits for a save)."""
        self.release(packet_id, known)
        return self.due(machine, now)

    def release(self, packet_id: int, known: bool) -> None:
        version = self.keys.release(self.scoped, packet_id) if self.keyed else self.keys.saved
        self.releasing.append((version, packet_id, known))

    def released(self) -> list[tuple[int, bool]]:
        """The releases now durable, in order: (packet id, known), PUBCOMP to send."""
        saved = self.keys.saved
        done = [(pid, known) for version, pid, known in self.releasing if version <= saved]
        if done:
            self.releasing = [r for r in self.releasing if r[0] > saved]
        return done
