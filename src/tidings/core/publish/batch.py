"""A PUBLISH's events checked and encoded in one pass, for the intake's common case.

Theory of operation. Most PUBLISHes are many well-formed events on channels the intake has
validated before, without attributes: `[channel, {}, payload]`, the channel a key of the intake's
channel cache (`known`), the payload binary and at most `size_max` bytes. `encode` checks that of
every event and, when all pass, encodes each one's record at ticks `first`, `first + 1`, ... exactly
as `core/event.py encode_records` does, and returns

    (records, deliveries, size, channel, ticks, table)

the records (bytes, in tick order), the (tick, channel, attributes, record) tuples the pubend holds
until the batch is durable, the records' bytes in all, the channel when every event has the same
one (else None), the ticks (the compiled form's are the only int per event: a list of new ints,
one per event, cost a broker in (a) about 5 % of its event loop), and the table of the batch record
the log keeps them in (storage/record.py: u32 count, then u32 where each record ends; None when the
body would pass BATCH_BYTES_MAX). The Append carries the ticks, the records and the table as one
`RecordRun`, so the log writer only joins the table with the records and checksums the whole
(storage/record.py `encode`), with no (tick, record) pair per event anywhere. A batch on one channel
gets no deliveries (None): the pubend holds the run in their place (core/publish/pubend.py
PendingBatch), so a one-channel PUBLISH, the common one, costs no tuple per event. When any event is outside that
shape it returns None and decides nothing: the intake then checks the PUBLISH event by event
(core/publish/intake.py `_check`), which refuses what is bad and says why. So no rule lives here
that the Python checks do not also hold, and a batch is encoded the same whichever path took it.

A PUBLISH whose frame is exactly that shape need not be decoded at all: `scan` reads a frame body
in place (the decoder's first look, core/wire/decoders.py) and says whether it is
`[PUBLISH, seq, [[channel, {}, payload], ...]]` with ASCII channels and nothing after the events,
and `encode_frame` gives `encode`'s answer for those events read from the body, with no Python
object per event (the PUBLISH's `events` are decoded by msgpack only if something asks for them:
core/wire/messages.py Publish). Only the compiled form reads frames; with it off (or not built),
every PUBLISH is decoded by msgpack and takes `encode`, as before. tests/unit/test_publish_batch.py
holds the decoder's message and `encode_frame`'s answer equal to msgpack's and `encode_python`'s
for any body, and a broker's records and answers equal through either form.

Two implementations give the same answer for every input: `encode_python` below, and the compiled
`_batch.encode` (`_batch.c`, built by setup.py where a C compiler is found; optional). The
compiled one is used when it was built, unless the runtime switched it off (`use_native(False)`:
the broker does when TIDINGS_NATIVE_PUBLISH=0, aio/server.py). tests/unit/test_publish_batch.py
holds the two equal with Hypothesis, and both equal to `encode_records`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate, chain
from typing import Any, overload

import msgpack

from tidings.core.event import encode_records

try:
    from tidings.core.publish import _batch  # the compiled fast path (setup.py): optional
except ImportError:  # built where no C compiler was found: the Python form below
    _batch = None  # type: ignore[assignment]

Delivery = tuple[int, str, dict[str, Any], bytes]  # tick, channel, attributes, record (core/publish/pubend.py)
# records, deliveries, size, channel, ticks, table (module docstring)
Encoded = tuple[list[bytes], list[Delivery] | None, int, str | None, list[int], bytes | None]
BATCH_BYTES_MAX = (1 << 30) - 1  # storage/record.py BATCH_BYTES_MAX: a batch record's body (not imported: core)


class _Pairs(Sequence[tuple[int, bytes]]):
    """(tick, record) pairs by index or slice, as a log append reads them (storage/record.py)."""

    __slots__ = ()

    @overload
    def __getitem__(self, i: int) -> tuple[int, bytes]: ...

    @overload
    def __getitem__(self, i: slice) -> list[tuple[int, bytes]]: ...

    def __getitem__(self, i: int | slice) -> tuple[int, bytes] | list[tuple[int, bytes]]:
        return self._pairs(i) if isinstance(i, slice) else self._pair(i)

    def _pair(self, i: int) -> tuple[int, bytes]:
        raise NotImplementedError

    def _pairs(self, i: slice) -> list[tuple[int, bytes]]:
        raise NotImplementedError


class RecordRun(_Pairs):
    """A PUBLISH's records at consecutive ticks, as the one pass made them: two columns, `ticks`
    and `records`, and `table`, the table of the batch record the log keeps them in (u32 count,
    then u32 where each record ends, little-endian: storage/record.py), or None when that record's
    body would pass BATCH_BYTES_MAX. It is the Append's records (core/effects.py) and what the
    pubend holds of a one-channel batch until it is durable (PendingBatch), so the fan-out and the
    trees take the columns as they are and the log writer joins the table with the records
    (storage/record.py `encode`): no (tick, record) pair is made per event. As a sequence it reads
    as the (tick, record) pairs it stands for, made on demand, for the readers that want them (the
    simulator's disk, a log append's other forms).

    Invariants: `ticks` are consecutive, one per record, in order; `table`, when given, is exactly
    the table of `records`. The lists are shared, read only."""

    __slots__ = ("records", "table", "ticks")

    def __init__(self, ticks: list[int], records: list[bytes], table: bytes | None) -> None:
        self.ticks = ticks
        self.records = records
        self.table = table

    def __len__(self) -> int:
        return len(self.records)

    def _pair(self, i: int) -> tuple[int, bytes]:
        return self.ticks[i], self.records[i]

    def _pairs(self, i: slice) -> list[tuple[int, bytes]]:
        return list(zip(self.ticks[i], self.records[i], strict=True))

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        return zip(self.ticks, self.records, strict=True)

    def __repr__(self) -> str:
        return f"RecordRun({self.ticks!r}, {self.records!r}, {self.table!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RecordRun):
            return (self.ticks, self.records, self.table) == (other.ticks, other.records, other.table)
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # (mutable lists inside, as a list)

    @property
    def runs(self) -> tuple[RecordRun, ...]:
        """The runs it is made of (itself): the log writes each as its own batch record."""
        return (self,)


class RecordRuns(_Pairs):
    """The runs of consecutive PUBLISHes of one input, appended as one: the intake merges an
    input's Appends (core/publish/intake.py `_append`), so the log writer takes them with one
    write. Each run stays its own batch record (storage/record.py `encode`), exactly as it would
    be appended alone; as a sequence it reads as the (tick, record) pairs of every run in order.

    Invariants: the runs' ticks rise from one run to the next; each run keeps its own. The list of
    runs grows while the input is read (`merged`), and not once its Append has left."""

    __slots__ = ("runs",)

    def __init__(self, runs: list[RecordRun]) -> None:
        self.runs = runs

    def __len__(self) -> int:
        return sum(map(len, self.runs))

    def _pairs(self, i: slice) -> list[tuple[int, bytes]]:
        return list(self)[i]

    def _pair(self, i: int) -> tuple[int, bytes]:
        if i < 0:
            i += len(self)
        for run in self.runs:
            if 0 <= i < len(run):
                return run[i]
            i -= len(run)
        raise IndexError("RecordRuns index out of range")

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        return chain.from_iterable(self.runs)

    def __repr__(self) -> str:
        return f"RecordRuns({self.runs!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]


def merged(held: Sequence[tuple[int, bytes]], run: RecordRun) -> RecordRuns | None:
    """`held` (the records of an Append not yet carried out: a run, or runs) and the `run` after it
    as one Append's records (runs `held` extended in place); None when `held` is not the intake's
    (a list: keyed, or checked event by event)."""
    if type(held) is RecordRuns:
        held.runs.append(run)
        return held
    if type(held) is RecordRun:
        return RecordRuns([held, run])
    return None


def batch_table(records: Sequence[bytes]) -> bytes | None:
    """The table of the batch record holding `records` (storage/record.py): u32 count, then u32
    where each record ends; None when the record's body would pass BATCH_BYTES_MAX."""
    count = len(records)
    size = 4 + 4 * count + sum(map(len, records))
    if size > BATCH_BYTES_MAX:
        return None
    return struct.pack(f"<I{count}I", count, *accumulate(map(len, records)))
Encoder = Callable[[list[object], dict[str, Any], int, str, int, str, str, bool], Encoded | None]

_pack = msgpack.Packer().pack


def encode_python(events: list[object], known: dict[str, Any], size_max: int, pubend: str, first: int,
                  service: str, instance: str, authenticated: bool) -> Encoded | None:
    """The batch's records and deliveries when every event is `[channel, {}, payload]` on a known
    channel with a payload of at most `size_max` bytes; else None (module docstring)."""
    if not events or first < 0 or first + len(events) > 2**63 - 1:
        return None
    same = None
    uniform = True
    for ev in events:
        if type(ev) is not list or len(ev) != 3:
            return None
        channel, attributes, payload = ev
        if (type(channel) is not str or type(attributes) is not dict or attributes
                or type(payload) is not bytes or len(payload) > size_max or channel not in known):
            return None
        if same is None:
            same = channel
        elif uniform and channel != same:
            uniform = False
    try:
        pairs = encode_records(_pack, pubend, first, events, service, instance,  # type: ignore[arg-type]
                               authenticated)
    except UnicodeEncodeError:  # a string that is not UTF-8: the Python checks say so
        return None
    records = [rec for _, rec in pairs]
    size = sum(map(len, records))
    ticks = list(range(first, first + len(records)))
    table = batch_table(records)
    if uniform:
        return records, None, size, same, ticks, table
    deliveries = [(t, ev[0], ev[1], rec) for t, rec, ev in zip(ticks, records, events, strict=True)]  # type: ignore[index]
    return records, deliveries, size, None, ticks, table


def _native(events: list[object], known: dict[str, Any], size_max: int, pubend: str, first: int,
            service: str, instance: str, authenticated: bool) -> Encoded | None:
    if first < 0:  # (the compiled form takes an unsigned tick)
        return None
    encoded: Encoded | None = _batch.encode(events, known, size_max, pubend, first, service, instance,
                                            authenticated)
    return encoded


encode: Encoder = encode_python if _batch is None else _native

PUBLISH_TYPE = 2  # core/wire/types.py ClientType.PUBLISH (not imported: core/wire imports this module)
ACK_TYPE = 17  # core/wire/types.py ClientType.ACK
_U64_END = 1 << 64
_FRAME_HEADER = struct.Struct(">I")  # core/wire/frames.py HEADER


def ack_run(seq: int, pubend: str, first: int, count: int) -> bytes:
    """The ACK frame of a PUBLISH logged whole at ticks `first`, ..., `first + count - 1`: byte for
    byte core/wire/messages.py `ack(seq, pubend, ticks)`, packed by the compiled form from the first
    tick and the count (no int object per tick, no msgpack pass over them), by msgpack otherwise.
    tests/unit/test_publish_batch.py holds the two equal to `messages.ack`."""
    if encode is _native and 0 <= seq < _U64_END and first >= 0 and count > 0 and first + count <= _U64_END:
        packed: bytes = _batch.ack_run(ACK_TYPE, seq, pubend, first, count)
        return packed
    body = msgpack.packb([ACK_TYPE, seq, pubend, list(range(first, first + count))])
    return _FRAME_HEADER.pack(len(body)) + body


def _scan_none(body: bytes) -> tuple[int, int, int] | None:
    return None


def _scan_native(body: bytes) -> tuple[int, int, int] | None:
    scanned: tuple[int, int, int] | None = _batch.scan(body, PUBLISH_TYPE)
    return scanned


# A frame body read in place: (seq, at, count) when it is exactly [PUBLISH, seq, [[channel, {}, payload], ...]]
# with ASCII channels, at least one event and nothing after them; else None (core/wire/decoders.py).
# Only the compiled form reads frames: with it off, every PUBLISH is decoded by msgpack, as before.
scan: Callable[[bytes], tuple[int, int, int] | None] = _scan_none if _batch is None else _scan_native


def encode_frame(body: bytes, at: int, count: int, known: dict[str, Any], size_max: int, pubend: str, first: int,
                 service: str, instance: str, authenticated: bool) -> Encoded | None:
    """`encode` of the `count` events at byte `at` of a PUBLISH body that `scan` took, read from
    the body (no Python object per event): the same answer `encode` gives for the events msgpack
    decodes from it (tests/unit/test_publish_batch.py holds the two equal)."""
    if _batch is None or first < 0:
        events: list[object] = msgpack.unpackb(body, strict_map_key=True)[2]
        return encode_python(events, known, size_max, pubend, first, service, instance, authenticated)
    encoded: Encoded | None = _batch.encode_frame(body, at, count, known, size_max, pubend, first, service,
                                                  instance, authenticated)
    return encoded


def native() -> bool:
    """Whether `encode` is the compiled form."""
    return encode is _native


def use_native(on: bool) -> None:
    """The compiled form when `on` and built, else the Python one (the runtime's switch): `encode`,
    and whether PUBLISH frames are read in place (`scan`)."""
    global encode, scan  # noqa: PLW0603 - the one switch, set by the runtime at start
    on = on and _batch is not None
    encode = _native if on else encode_python
    scan = _scan_native if on else _scan_none
