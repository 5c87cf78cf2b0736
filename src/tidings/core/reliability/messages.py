"""Guaranteed delivery's broker-to-broker messages (types 160..191): Gryphon's knowledge, ack and
nack messages (§3.1, §3.2), on one stream edge of a (tree, pubend) knowledge tree.

Each is a msgpack-able list whose first element is its type. Ticks are (after, through] ranges as
everywhere else, 0 <= tick <= TICK_MAX.

- KNOWLEDGE, parent to child: [160, tree, pubend, after, through, ticks, records, retransmit, epoch,
  lost]. Every tick of (after, through] is known: D at `ticks` (strictly increasing, inside the
  range), whose logged event records are `records` (same length, same order), F at every other tick.
  A data message has ticks, a silence message none. `retransmit` is False on a first-time message,
  True when the message answers a nack (the paper forwards the two differently). `epoch` is the
  epoch of the child's filter summary the message was filtered by, or null when it was not filtered
  (a child that sent no summary, the pubend's leg, or a child whose summary matches everything).
  `lost` True makes every tick of the range L instead (no ticks, no records): the pubend released
  those ticks before this stream learnt them, and a subscriber that wanted them gets a gap.
- ACK, child to parent: [161, [[tree, pubend, through, released, delivered], ...]]: for each stream,
  every tick <= through is A on the sender's side; every durable subscription at or below the
  sender has released (consumed and acknowledged) every tick <= released; and every subscriber
  below that keeps up has been given every tick <= delivered, counting brokers that left the tree
  a moment ago as still there (released <= delivered <= through; the release protocol, release.py).
  One message carries the acks of many streams to one parent.
- NACK, child to parent: [162, tree, pubend, [[after, through], ...]] or [162, tree, pubend,
  [[after, through], ...], true]: the sender is curious about those ranges (sorted, not overlapping,
  each non-empty and at most NACK_RANGE_TICKS_MAX wide; the sender chops longer gaps, and a nack
  names at most NACK_RANGES_MAX of them). The fifth element, sent only when true, says the nack is
  *complete* over its span (from the first range's after to the last range's through): the sender
  knows every tick there that the ranges leave out, so a forwarder fetches and sends only the ranges
  (a PFS catchup's sparse nack, docs/durable.md), not the whole span.

- KNOWLEDGE, pubend's broker to the rendez-vous point it has learnt (from the root's ACKs): the same
  message sent straight, not routed; ROOT_MOVED `[163, tree]` answers it from a broker that is not
  the root (any more), and the pubend routes again.

- MOVED, one broker to another: [165, home, registration]: the durable subscription that broker
  `home` (a pubend id: the receiver checks it is its own) hosted as `registration` resumed elsewhere,
  from a token; the home drops it, so it no longer holds release back.

- SUMMARY, child to parent: [164, tree, epoch, summary, from]: from now on filter what goes to the
  sender on `tree` by `summary` (null: everything; else [[pattern, filter], ...], summary.py), and
  stamp it with `epoch`. `from` is a tick: when the summary is wider than the one the parent held,
  the parent sends the sender every tick after `from` again, filtered by the new summary.

The paper's ACK_EXPECTED has no message of its own here: the pubend's periodic silence up to the
present (reliability/source.py) tells every broker below how far the stream reaches, which is what
makes a broker nack ticks it lacks.

Peers are untrusted: `decode` checks every field, including that a tick is an int and not a bool
(`True` is an int in Python), and raises ProtocolError (bad-message) on anything malformed. It does
not check a record's contents: the stream does that when it routes the event. A decode runs in this
module alone (its checks are written here, not called from a shared helper): every hop of every
event decodes a KNOWLEDGE, and bench/path_trace.py counts a codec that calls out as a stop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidings.core.errors import BAD_MESSAGE, ProtocolError
from tidings.core.event import TICK_MAX
from tidings.core.multicast.messages import TREE_BYTES_MAX
from tidings.core.reliability.summary import Summary
from tidings.core.reliability.summary import decode as decode_summary
from tidings.core.reliability.summary import to_wire as summary_wire
from tidings.core.wire.packable import WireArray
from tidings.core.wire.types import ReliabilityType

REGISTRATION_MAX = 2**63 - 1

PUBEND_BYTES_MAX = 128  # pubend ids are "p" and 16 hex digits today; room for other schemes
RECORDS_PER_MESSAGE_MAX = 16_384  # data ticks in one knowledge message (a publish frame holds 4,096 events)
RECORD_BYTES_MAX = 256 * 1024 * 1024  # a sanity bound; frame_bytes_max bounds what really arrives
ACK_ENTRIES_MAX = 4096  # streams acked in one ACK, as many as trees in one Scribe HEARTBEAT
NACK_RANGES_MAX = 64  # ranges in one NACK
NACK_RANGE_TICKS_MAX = 60_000_000  # ticks in one nack range: 60 s of microsecond stream time


@dataclass(frozen=True, slots=True)
class KnowledgeMessage:
    """Ticks (after, through] are known: D at `ticks` with `records`, F elsewhere."""

    tree: str
    pubend: str
    after: int
    through: int
    ticks: tuple[int, ...]
    records: tuple[bytes, ...]
    retransmit: bool
    epoch: int | None = None  # the filter summary's epoch it was filtered by; None: not filtered
    lost: bool = False  # every tick of the range is L (released at the pubend): no data

    def to_wire(self) -> WireArray:
        return knowledge_wire(self.tree, self.pubend, self.after, self.through, list(self.ticks),
                              list(self.records), self.retransmit, self.epoch, self.lost)


def knowledge_wire(tree: str, pubend: str, after: int, through: int, ticks: list[int], records: list[bytes],
                   retransmit: bool, epoch: int | None = None, lost: bool = False) -> WireArray:
    """A Knowledge message's wire form straight from lists the caller hands over (no copies: a
    forwarder sends every event it forwards through here)."""
    return [ReliabilityType.KNOWLEDGE, tree, pubend, after, through, ticks, records, retransmit, epoch, lost]


@dataclass(frozen=True, slots=True)
class StreamAck:
    """One stream's ack: every tick <= `through` is A, every tick <= `released` is released by every
    durable subscription at or below the sender, and every tick <= `delivered` reached every
    subscriber below that keeps up (Gryphon's latestDelivered)."""

    tree: str
    pubend: str
    through: int
    released: int
    delivered: int


@dataclass(frozen=True, slots=True)
class StreamAcks:
    streams: tuple[StreamAck, ...]

    def to_wire(self) -> WireArray:
        return [ReliabilityType.ACK, [[s.tree, s.pubend, s.through, s.released, s.delivered] for s in self.streams]]


@dataclass(frozen=True, slots=True)
class Nack:
    """Curiosity about `ranges`, each an (after, through] pair; `complete`: the sender knows every
    other tick of their span (from the first after to the last through)."""

    tree: str
    pubend: str
    ranges: tuple[tuple[int, int], ...]
    complete: bool = False

    def to_wire(self) -> WireArray:
        wire: WireArray = [ReliabilityType.NACK, self.tree, self.pubend,
                           [[after, through] for after, through in self.ranges]]
        if self.complete:
            wire.append(True)
        return wire


@dataclass(frozen=True, slots=True)
class RootMoved:
    """The answer to KNOWLEDGE sent straight to a broker that is not (or no longer) `tree`'s
    rendez-vous point: the pubend forgets it as the root and routes its knowledge again."""

    tree: str

    def to_wire(self) -> WireArray:
        return [ReliabilityType.ROOT_MOVED, self.tree]


@dataclass(frozen=True, slots=True)
class SummaryUpdate:
    """The sender's filter summary for `tree` (None: everything), epoch `epoch`; after a widening
    the receiver sends it every tick after `since` again."""

    tree: str
    epoch: int
    summary: Summary | None
    since: int

    def to_wire(self) -> WireArray:
        return [ReliabilityType.SUMMARY, self.tree, self.epoch, summary_wire(self.summary), self.since]


@dataclass(frozen=True, slots=True)
class Moved:
    """The durable subscription `home` hosted as `registration` resumed on the sender."""

    home: str
    registration: int

    def to_wire(self) -> WireArray:
        return [ReliabilityType.MOVED, self.home, self.registration]


ReliabilityMessage = KnowledgeMessage | StreamAcks | Nack | RootMoved | SummaryUpdate | Moved


def _bad(what: str) -> ProtocolError:
    return ProtocolError(BAD_MESSAGE, f"reliability: {what}")


def _name(value: object, bytes_max: int, what: str) -> str:
    """A non-empty string of at most `bytes_max` UTF-8 bytes (as wire/typed.py's `name`)."""
    # a string never has more characters than UTF-8 bytes, so a long one is refused before encoding
    if type(value) is str and 0 < len(value) <= bytes_max and len(value.encode("utf-8", "surrogatepass")) <= bytes_max:
        return value
    raise _bad(f"{what} is a non-empty string of at most {bytes_max} bytes")


def _stream(tree: object, pubend: object) -> tuple[str, str]:
    return _name(tree, TREE_BYTES_MAX, "a tree name"), _name(pubend, PUBEND_BYTES_MAX, "a pubend id")


def _tick(value: object, what: str) -> int:
    if type(value) is int and 0 <= value <= TICK_MAX:
        return value
    raise _bad(f"{what} is an integer tick from 0 to {TICK_MAX}")


def _list(value: object, size_max: int, what: str) -> list[Any]:
    if type(value) is list and len(value) <= size_max:
        return value
    raise _bad(f"{what} is a list of at most {size_max} entries")


def _knowledge(f: list[Any]) -> KnowledgeMessage:
    tree, pubend = _stream(f[0], f[1])
    after, through = _tick(f[2], "after"), _tick(f[3], "through")
    if after >= through:
        raise _bad("a knowledge message covers at least one tick: after < through")
    ticks = _list(f[4], RECORDS_PER_MESSAGE_MAX, "ticks")
    records = _list(f[5], RECORDS_PER_MESSAGE_MAX, "records")
    if len(ticks) != len(records):
        raise _bad("a knowledge message has one record per data tick")
    previous = after
    for tick in ticks:
        if type(tick) is not int or not previous < tick <= through:
            raise _bad("data ticks are strictly increasing integers inside (after, through]")
        previous = tick
    for record in records:
        if type(record) is not bytes or not 0 < len(record) <= RECORD_BYTES_MAX:
            raise _bad(f"a record is non-empty bytes of at most {RECORD_BYTES_MAX}")
    if type(f[6]) is not bool or type(f[8]) is not bool:
        raise _bad("retransmit and lost are booleans")
    if f[8] and ticks:
        raise _bad("a lost range carries no data ticks")
    return KnowledgeMessage(tree, pubend, after, through, tuple(ticks), tuple(records), f[6], _epoch(f[7], True), f[8])


def _epoch(value: object, nullable: bool) -> int | None:
    if (value is None and nullable) or (type(value) is int and 0 <= value <= TICK_MAX):
        return value
    raise _bad(f"an epoch is an integer from 0 to {TICK_MAX}")


def _summary(f: list[Any]) -> SummaryUpdate:
    tree = _name(f[0], TREE_BYTES_MAX, "a tree name")
    epoch = _epoch(f[1], False)
    assert epoch is not None
    return SummaryUpdate(tree, epoch, decode_summary(f[2]), _tick(f[3], "from"))


def _ack(f: list[Any]) -> StreamAcks:
    entries = _list(f[0], ACK_ENTRIES_MAX, "an ack's stream list")
    if not entries:
        raise _bad("an ack names at least one stream")
    streams = []
    for entry in entries:
        if type(entry) is not list or len(entry) != 5:
            raise _bad("an ack entry is [tree, pubend, through, released, delivered]")
        through, released = _tick(entry[2], "an ack's through"), _tick(entry[3], "an ack's released")
        delivered = _tick(entry[4], "an ack's delivered")
        if not released <= delivered <= through:
            raise _bad("an ack's released is at most its delivered, which is at most its through")
        streams.append(StreamAck(*_stream(entry[0], entry[1]), through, released, delivered))
    return StreamAcks(tuple(streams))


def _nack(f: list[Any]) -> Nack:
    tree, pubend = _stream(f[0], f[1])
    pairs = _list(f[2], NACK_RANGES_MAX, "a nack's range list")
    if not pairs:
        raise _bad("a nack names at least one range")
    ranges = []
    previous = 0
    for pair in pairs:
        if type(pair) is not list or len(pair) != 2:
            raise _bad("a nack range is [after, through]")
        after, through = _tick(pair[0], "a nack's after"), _tick(pair[1], "a nack's through")
        if not previous <= after < through <= after + NACK_RANGE_TICKS_MAX:
            raise _bad(f"nack ranges are sorted, disjoint, non-empty and at most {NACK_RANGE_TICKS_MAX} "
                       "ticks wide")
        ranges.append((after, through))
        previous = through
    complete = f[3] if len(f) > 3 else False
    if type(complete) is not bool:
        raise _bad("a nack's completeness is true or false")
    return Nack(tree, pubend, tuple(ranges), complete)


# the decoders' boundary: `_knowledge` ... take a message's fields as msgpack decoded them (unchecked),
# and check every one they read before they build the typed message
_DECODERS: dict[int, tuple[int, Callable[[list[Any]], ReliabilityMessage]]] = {
    ReliabilityType.KNOWLEDGE: (9, _knowledge),
    ReliabilityType.ACK: (1, _ack),
    ReliabilityType.NACK: (3, _nack),
    ReliabilityType.ROOT_MOVED: (1, lambda f: RootMoved(_name(f[0], TREE_BYTES_MAX, "a tree name"))),
    ReliabilityType.SUMMARY: (4, _summary),
    ReliabilityType.MOVED: (2, lambda f: Moved(_name(f[0], PUBEND_BYTES_MAX, "a pubend id"), _registration(f[1]))),
}


def _registration(value: object) -> int:
    if type(value) is int and 0 < value <= REGISTRATION_MAX:
        return value
    raise _bad(f"a registration is an integer from 1 to {REGISTRATION_MAX}")


def decode(message: object) -> ReliabilityMessage:
    """The reliability message in `message` (a decoded msgpack value); ProtocolError if malformed."""
    if type(message) is not list or not message or type(message[0]) is not int:
        raise _bad("a message is a list starting with its type")
    shape = _DECODERS.get(message[0])
    if shape is None:
        raise _bad(f"unknown message type {message[0]}")
    count, build = shape
    if len(message) != count + 1 and not (message[0] == ReliabilityType.NACK and len(message) == count + 2):
        raise _bad(f"message type {message[0]} has {count} fields")
    return build(message[1:])
