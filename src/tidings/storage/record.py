"""The on-disk record format of the pubend's event log, and a scanner that validates it.

A record is a 16-byte header followed by its body, all little-endian:

    offset 0   u32  length   body bytes (the header is not counted); bit 31 marks a keyed record,
                             bit 30 a batch record
    offset 4   u32  crc      zlib.crc32 of the 8 tick bytes followed by the body
    offset 8   u64  tick     the event's tick (a batch record: its first event's), >= 1
    offset 16  ...  body     a single record's: the payload, opaque bytes (the broker's msgpack
                             event array); a batch record's: see below

A keyed record (an idempotent publish, core/publish/dedup.py) has the top bit of `length` set and its body
is the payload, then the key, then the key's length as a u16: readers get the payload alone, and
recovery reads the keys of the log's tail without decoding any event.

A batch record holds the events of one PUBLISH (one append of consecutive ticks) under one header
and one checksum: `count` events at ticks `tick`, `tick + 1`, ..., `tick + count - 1`. Its body is
u32 count (>= 1), then `count` u32 ends (where each payload ends, counted from the first payload's
start: they never fall), then the payloads one after another; a keyed batch (both bits) then has
`count` u32 ends of the keys and the keys. The table lets a reader cut out exactly the ticks it
wants without decoding any event; a record is checked whole (its checksum, and its tables, which
must account for every byte of the body), so a torn batch is dropped whole. Single records (all
logs written before batches, and every append of one event) and batch records mix freely.

Records follow each other with no padding. A record is valid when its whole extent lies inside the
bytes being scanned, its checksum matches, and its (first) tick is greater than the (last) tick
before it. Those three checks turn every shape a crash can leave at the end of a file into a clean
stop: a header cut short, a payload cut short, a length that points past the end (garbage), a
zero-filled tail (a zero tick is never greater than the previous one, and crc32 of eight zero bytes
is not zero) and stale bytes from an earlier life of the file (wrong checksum or a tick going
backwards).
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator, Sequence
from itertools import accumulate
from typing import Any, Protocol

HEADER = struct.Struct("<IIQ")
HEADER_BYTES = HEADER.size
_TICK = struct.Struct("<Q")
KEYED = 1 << 31  # in `length`: the body ends with a key and its u16 length (a batch: the keys' table)
BATCH = 1 << 30  # in `length`: the body is a batch of consecutive ticks
LENGTH_MASK = BATCH - 1
PAYLOAD_BYTES_MAX = LENGTH_MASK
BATCH_BYTES_MAX = PAYLOAD_BYTES_MAX  # a batch record's body: a longer run of ticks becomes several
KEY_BYTES_MAX = 0xFFFF
_KEY_LENGTH = struct.Struct("<H")
_U32 = struct.Struct("<I")
SCAN_CHUNK_BYTES = 1 << 20


def checksum(tick_bytes: bytes | memoryview, payload: bytes | memoryview) -> int:
    return zlib.crc32(payload, zlib.crc32(tick_bytes))


def encode(records: Sequence[tuple[int, bytes]], after_tick: int, base_offset: int,
           next_index_offset: int, index_interval_bytes: int,
           keys: Sequence[bytes] | None = None, *,
           batch: bool = False) -> tuple[bytes | bytearray, list[tuple[int, int]]]:
    """One buffer holding `records` (each keyed with the key at its index in `keys`, if given),
    and the sparse index entries `(tick, offset)` it adds. With `batch`, each run of consecutive
    ticks of two or more records is written as one batch record (one header, one checksum).

    Ticks must rise strictly and exceed `after_tick`. The buffer will be written at `base_offset`;
    a record starting at or past `next_index_offset` gets an index entry, and the next entry is due
    `index_interval_bytes` after it. This runs on the write path, under the GIL the event loop also
    needs, hence the local bindings and a single join.

    `records` may be runs whose batch tables the intake made already (`runs` of `BatchRun`s:
    core/publish/batch.py RecordRun and RecordRuns, the common append): with `batch`, each run
    becomes the batch record `_encode_batches` would write for it alone, all with a single join and
    one checksum call per run, without a Python step per record.
    """
    runs: Sequence[BatchRun] | None = getattr(records, "runs", None) if batch and keys is None else None
    if runs is not None and all(run.table is not None for run in runs):
        return _encode_runs(runs, after_tick, base_offset, next_index_offset, index_interval_bytes)
    if batch and len(records) > 1:
        return _encode_batches(records, after_tick, base_offset, next_index_offset, index_interval_bytes, keys)
    parts: list[bytes] = []
    append = parts.append
    entries: list[tuple[int, int]] = []
    pack_header, pack_tick, crc32 = HEADER.pack, _TICK.pack, zlib.crc32
    offset = base_offset
    previous = after_tick
    for n, (tick, payload) in enumerate(records):
        size = len(payload)
        if keys is not None:
            key = keys[n]
            assert len(key) <= KEY_BYTES_MAX
            trailer = key + _KEY_LENGTH.pack(len(key))
            size += len(trailer)
        if tick <= previous or size > PAYLOAD_BYTES_MAX:
            raise AssertionError(f"record with tick {tick} after {previous}, {size} bytes, is not loggable")
        if offset >= next_index_offset:
            entries.append((tick, offset))
            next_index_offset = offset + index_interval_bytes
        crc = crc32(payload, crc32(pack_tick(tick)))
        if keys is None:
            append(pack_header(size, crc, tick))
            append(payload)
        else:  # the body is the payload then the trailer, checksummed as one
            append(pack_header(size | KEYED, crc32(trailer, crc), tick))
            append(payload)
            append(trailer)
        offset += HEADER_BYTES + size
        previous = tick
    return b"".join(parts), entries


def _encode_batches(records: Sequence[tuple[int, bytes]], after_tick: int, base_offset: int,
                    next_index_offset: int, index_interval_bytes: int,
                    keys: Sequence[bytes] | None) -> tuple[bytes, list[tuple[int, int]]]:
    """encode's batch form: the records cut into runs of consecutive ticks, a batch record per run
    of two or more (a single record otherwise). The intake's appends are one run each, found
    without a Python step per record (the ticks compared as one list with the run's range)."""
    ticks, payloads = zip(*records, strict=True)
    first, count = ticks[0], len(ticks)
    runs = [(0, count)] if list(ticks) == list(range(first, first + count)) else _runs(ticks)
    if sum(map(len, payloads)) + sum(map(len, keys or ())) + 8 * count > BATCH_BYTES_MAX:
        runs = _fitted(runs, payloads, keys)
    parts: list[bytes | bytearray] = []
    entries: list[tuple[int, int]] = []
    offset, previous = base_offset, after_tick
    for start, stop in runs:
        tick = ticks[start]
        if stop - start == 1:
            buf, more = encode([records[start]], previous, offset, next_index_offset, index_interval_bytes,
                               None if keys is None else [keys[start]])
        else:
            if tick <= previous:
                raise AssertionError(f"record with tick {tick} after {previous} is not loggable")
            body = _batch_body(payloads[start:stop], None if keys is None else keys[start:stop])
            assert len(body) <= PAYLOAD_BYTES_MAX, f"a batch record of {len(body)} bytes"  # (_fitted)
            flags = BATCH if keys is None else BATCH | KEYED
            buf = HEADER.pack(len(body) | flags, zlib.crc32(body, zlib.crc32(_TICK.pack(tick))), tick) + body
            more = [(tick, offset)] if offset >= next_index_offset else []
        if more:
            next_index_offset = more[-1][1] + index_interval_bytes
            entries += more
        parts.append(buf)
        offset += len(buf)
        previous = ticks[stop - 1]
    return b"".join(parts), entries


class BatchRun(Protocol):
    """Records at consecutive ticks held as two columns, with their batch record's table made
    (core/publish/batch.py RecordRun; an append is one run or several, `runs`): `ticks[i]` is
    `ticks[0] + i`, and `table` is exactly the table `_batch_body` writes for `records` (u32
    count, then u32 where each one ends), within BATCH_BYTES_MAX with them; None if they pass it."""

    @property
    def ticks(self) -> Sequence[int]: ...

    @property
    def records(self) -> Sequence[bytes]: ...

    @property
    def table(self) -> bytes | None: ...


_ZERO_HEADER = bytes(HEADER_BYTES)
_LENGTH_CRC = struct.Struct("<II")


def _encode_runs(runs: Sequence[BatchRun], after_tick: int, base_offset: int, next_index_offset: int,
                 index_interval_bytes: int) -> tuple[bytes | bytearray, list[tuple[int, int]]]:
    """encode's records of runs with their tables: each run one batch record (a run of one event a
    single record), as `_encode_batches` writes them, all joined once into one buffer with the
    records, then each one's tick, length and checksum written in place (a checksum covers the
    tick's bytes and the body, which follow each other from the header's second half)."""
    parts: list[bytes] = []
    for run in runs:
        if len(run.records) > 1:
            parts += (_ZERO_HEADER, run.table, *run.records)  # type: ignore[arg-type]  # (a table: encode)
        elif run.records:
            parts += (_ZERO_HEADER, run.records[0])
    buf = bytearray().join(parts)
    entries: list[tuple[int, int]] = []
    offset, previous = 0, after_tick
    with memoryview(buf) as view:
        for run in runs:
            records = run.records
            if not records:
                continue
            tick = run.ticks[0]
            if tick <= previous:
                raise AssertionError(f"record with tick {tick} after {previous} is not loggable")
            if len(records) > 1:
                table = run.table
                assert table is not None
                body, flags = len(table) + _U32.unpack_from(table, len(table) - 4)[0], BATCH
            else:
                body, flags = len(records[0]), 0
            _TICK.pack_into(buf, offset + 8, tick)
            _LENGTH_CRC.pack_into(buf, offset, body | flags, zlib.crc32(view[offset + 8:offset + HEADER_BYTES + body]))
            if base_offset + offset >= next_index_offset:
                entries.append((tick, base_offset + offset))
                next_index_offset = base_offset + offset + index_interval_bytes
            offset += HEADER_BYTES + body
            previous = run.ticks[-1]
    assert offset == len(buf)
    return buf, entries


def _fitted(runs: list[tuple[int, int]], payloads: Sequence[bytes],
            keys: Sequence[bytes] | None) -> list[tuple[int, int]]:
    """`runs` cut where a batch's body would pass BATCH_BYTES_MAX (a PUBLISH frame larger than a
    record may be: frame_bytes_max is the operator's)."""
    out: list[tuple[int, int]] = []
    for start, stop in runs:
        cut, size = start, 4
        for i in range(start, stop):
            item = 8 + len(payloads[i]) + (len(keys[i]) if keys is not None else 0)
            if i > cut and size + item > BATCH_BYTES_MAX:
                out.append((cut, i))
                cut, size = i, 4
            size += item
        out.append((cut, stop))
    return out


def _runs(ticks: Sequence[int]) -> list[tuple[int, int]]:
    """(start, stop) of each run of consecutive ticks."""
    runs: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(ticks) + 1):
        if i == len(ticks) or ticks[i] != ticks[i - 1] + 1:
            runs.append((start, i))
            start = i
    return runs


def _batch_body(payloads: Sequence[bytes], keys: Sequence[bytes] | None) -> bytes:
    """A batch record's body: count, the payloads' ends, the payloads (then the keys' ends and keys)."""
    count = len(payloads)
    table = struct.pack(f"<I{count}I", count, *accumulate(map(len, payloads)))
    if keys is None:
        return b"".join([table, *payloads])
    assert len(keys) == count and all(len(key) <= KEY_BYTES_MAX for key in keys)
    return b"".join([table, *payloads, struct.pack(f"<{count}I", *accumulate(map(len, keys))), *keys])


def batch_table(buf: bytes | memoryview, body: int, record_end: int,
                keyed: bool) -> tuple[int, tuple[int, ...], int, tuple[int, ...]] | None:
    """The tables of the batch record whose body starts at `body` and ends at `record_end` of
    `buf` (its checksum checked): (where the payloads begin, their ends, where the keys begin,
    their ends; the last two empty for an unkeyed batch), or None when they do not account for
    exactly the body's bytes (a damaged record)."""
    count = _U32.unpack_from(buf, body)[0] if record_end - body >= 8 else 0
    data = body + 4 + 4 * count
    if count == 0 or data > record_end:
        return None
    ends = struct.unpack_from(f"<{count}I", buf, body + 4)
    keys = data + ends[-1] + 4 * count if keyed else record_end  # where the keys begin
    if not _rising(ends) or keys > record_end or (not keyed and data + ends[-1] != record_end):
        return None
    if not keyed:
        return data, ends, record_end, ()
    key_ends = struct.unpack_from(f"<{count}I", buf, keys - 4 * count)
    if not _rising(key_ends) or keys + key_ends[-1] != record_end:
        return None
    return data, ends, keys, key_ends


def _rising(ends: tuple[int, ...]) -> bool:
    """Whether a batch's ends never fall (each item's bytes lie after the one before it)."""
    return list(ends) == sorted(ends)


def batch_count(buf: bytes | memoryview, pos: int, record_end: int) -> int:
    """The event count of the batch record at `pos` of `buf`, ending at `record_end` (1 when its
    body is too short to hold one: the record is damaged, and its tables say so once checked)."""
    if record_end - pos < HEADER_BYTES + 8:
        return 1
    return max(int(_U32.unpack_from(buf, pos + HEADER_BYTES)[0]), 1)


class SpanError(ValueError):
    """A span of log bytes (`records_in`) that does not hold valid whole records."""


def records_in(span: bytes, after: int, through: int) -> list[memoryview]:
    """The payload of each event of `span` with after < tick <= through, checksum checked, in order.

    `span` is a run of whole records as logged, copied from a log file (a READ answered with the
    log's bytes, core/wire/messages.py SPAN), and whoever holds it checks it as a scan of the file
    would: SpanError names the first record that is torn or out of tick order, or the first whose
    checksum fails among those returned. A batch record gives the events of its ticks in the range.
    The reader's hot loop (a Spark task's), kept to one header unpack, one crc32 call and two views
    per single record (no copy): the payloads are views of `span`.
    """
    payloads: list[memoryview] = []
    append, unpack, crc32 = payloads.append, HEADER.unpack_from, zlib.crc32
    view = memoryview(span)
    size, pos, previous = len(span), 0, 0
    try:
        while pos < size:
            length, crc, tick = unpack(span, pos)  # struct.error: a torn header
            record_end = pos + HEADER_BYTES + (length & LENGTH_MASK)
            last = tick if not length & BATCH or record_end > size else tick + batch_count(span, pos, record_end) - 1
            if record_end > size or tick <= previous:
                raise SpanError(f"a record at byte {pos} of the span " + (
                    "runs past its end" if record_end > size else f"has tick {tick}, after {previous}"))
            if last > after:
                if tick > through:
                    break
                if crc32(view[pos + 8:record_end]) != crc:  # the tick and payload are contiguous
                    raise SpanError(f"the record of tick {tick} fails its checksum")
                if length & BATCH:
                    table = batch_table(span, pos + HEADER_BYTES, record_end, length >= KEYED)
                    if table is None:
                        raise SpanError(f"the batch record of tick {tick} has tables that do not fit it")
                    data, ends = table[0], table[1]
                    for i in range(max(after + 1 - tick, 0), min(through + 1 - tick, len(ends))):
                        append(view[data + (ends[i - 1] if i else 0):data + ends[i]])
                    if last > through:
                        break
                else:
                    body_end = record_end if length < KEYED else _body_end(span, record_end, length & LENGTH_MASK)
                    if body_end < 0:
                        raise SpanError(f"the record of tick {tick} has a key that runs past it")
                    append(view[pos + HEADER_BYTES:body_end])
            previous, pos = last, record_end
    except struct.error:
        raise SpanError(f"a torn header at byte {pos} of the span") from None
    return payloads


def _body_end(buf: bytes, record_end: int, length: int) -> int:
    """Where the payload of the keyed record ending at `record_end` ends (-1: a bad key length)."""
    if length < _KEY_LENGTH.size:
        return -1
    key_length: int = _KEY_LENGTH.unpack_from(buf, record_end - _KEY_LENGTH.size)[0]
    if key_length + _KEY_LENGTH.size > length:
        return -1
    return record_end - _KEY_LENGTH.size - key_length


class RecordScanner:
    """Walks the valid records of one file region `[start, end)` with positioned reads.

    Iterating yields `(offset, end_offset, first_tick, count)` for each record (count 1 for a
    single record, the event count of a batch); `take` is the walk for a log read, gathering
    `(tick, payload)` per event (with `keys=True`, `(tick, key)` per keyed event, unkeyed ones
    left out) after `skip_through`, up to a tick and a byte budget, in one loop, cutting a batch
    record at exactly the ticks asked for. Records wholly at or before `skip_through` are walked
    over with their bounds and tick order checked but not their checksum (a reader that seeks with
    the sparse index passes up to 64 KiB this way); every other record is checked whole (checksum,
    a key's length, a batch's tables). Iteration stops at `end` or at the first invalid record.
    Once it is exhausted, `offset` is where the valid prefix ends, `previous_tick` the last tick in
    it, and `problem` says why the scan stopped early (None when it reached `end`).
    """

    __slots__ = ("_chunk_bytes", "_fd", "_keys", "_skip_through", "end", "offset", "previous_tick", "problem")

    def __init__(self, fd: int, start: int, end: int, previous_tick: int, *, skip_through: int = 0,
                 keys: bool = False, chunk_bytes: int = SCAN_CHUNK_BYTES) -> None:
        self._fd = fd
        self._keys = keys
        self._chunk_bytes = chunk_bytes
        self._skip_through = skip_through
        self.offset = start
        self.end = end
        self.previous_tick = previous_tick
        self.problem: str | None = None

    def __iter__(self) -> Iterator[tuple[int, int, int, int]]:
        for buf in self._chunks():
            entries: list[Any] = []
            self._walk(buf, entries, None, 0, 0)
            yield from entries

    def take(self, out: list[tuple[int, bytes]], through_tick: int | None, bytes_max: int,
             taken: int) -> tuple[bool, int]:
        """Append `(tick, payload)` to `out` for each valid event after `skip_through` (checksum
        checked), up to `through_tick`, while the payloads fit in `bytes_max` with `taken` bytes
        already in `out` (the first event goes in whatever its size). Returns whether the read is
        complete (an event past `through_tick`, or the bytes spent) and the bytes now taken. The
        hot path of every log read: one loop per record, where iterating and filtering would be two.
        """
        through = (1 << 64) if through_tick is None else through_tick
        for buf in self._chunks():
            done, taken = self._walk(buf, out, through, bytes_max, taken)
            if done:
                return True, taken
        return False, taken

    def _chunks(self) -> Iterator[bytes]:
        """The region in chunks, each starting at `offset`, which the parse of the chunk advances."""
        while self.offset < self.end and self.problem is None:
            # One chunk per round; a record larger than the chunk gets a read of its own size.
            buf = os.pread(self._fd, min(self.end - self.offset, self._chunk_bytes), self.offset)
            if len(buf) < HEADER_BYTES:
                self.problem = "torn header" if self.offset + len(buf) >= self.end else "short read"
                return
            length = HEADER.unpack_from(buf, 0)[0] & LENGTH_MASK
            if HEADER_BYTES + length > len(buf) and self.offset + HEADER_BYTES + length <= self.end:
                buf = os.pread(self._fd, HEADER_BYTES + length, self.offset)
            before = self.offset
            yield buf
            if self.offset == before and self.problem is None:
                self.problem = "short read"  # the file is shorter than the region: no progress

    def _walk(self, buf: bytes, out: list[Any], through: int | None, bytes_max: int,
              taken: int) -> tuple[bool, int]:
        """The valid complete records at the start of `buf` (which begins at `offset`) into `out`:
        for `take`, `(tick, payload)` per event up to tick `through` and `bytes_max` (then whether
        the read is complete, and the bytes taken); for iteration (`through` None), `__iter__`'s
        tuples. A plain single record's payload is taken here; every other record is `_keep`'s."""
        iterating = through is None
        through = (1 << 64) if through is None else through
        unpack, crc32, append = HEADER.unpack_from, zlib.crc32, out.append
        view = memoryview(buf)
        size = len(buf)
        base, pos, previous, skip_through = self.offset, 0, self.previous_tick, self._skip_through
        every = iterating or self._keys  # `_keep` takes every record, else all but plain single ones
        problem: str | None = None
        done = False
        while pos + HEADER_BYTES <= size:
            length, crc, tick = unpack(buf, pos)
            record_end = pos + HEADER_BYTES + (length & LENGTH_MASK)
            if record_end > size:
                if base + record_end > self.end:
                    problem = "record runs past the end"
                break  # else the next chunk starts with this record
            if tick <= previous:
                problem = f"tick {tick} does not follow {previous}"
                break
            last = tick + batch_count(buf, pos, record_end) - 1 if length & BATCH else tick
            if last > skip_through:
                if tick > through:
                    done = True
                    break
                if crc32(view[pos + 8:record_end]) != crc:  # the tick and payload are contiguous
                    problem = "checksum mismatch"
                    break
                if every or length & (BATCH | KEYED):
                    problem, done, taken = self._keep(buf, base, pos, record_end, tick, length, out,
                                                      None if iterating else through, bytes_max, taken)
                    if problem is not None or done:
                        break
                else:
                    if out and taken + record_end - pos - HEADER_BYTES > bytes_max:
                        done = True
                        break
                    append((tick, buf[pos + HEADER_BYTES:record_end]))
                    taken += record_end - pos - HEADER_BYTES
                    if taken >= bytes_max:
                        done = True
                        break
            previous, pos = last, record_end
        self._settle(view, base + pos, previous, problem)
        return done and problem is None, taken

    def _keep(self, buf: bytes, base: int, pos: int, record_end: int, tick: int, length: int, out: list[Any],
              through: int | None, bytes_max: int, taken: int) -> tuple[str | None, bool, int]:
        """A checked record of `buf` other than a plain single one taken by a read: for iteration
        (`through` None) its entry; for a read, its share (a batch's events or keys in range, a
        keyed record's payload or key) as `take` says. Returns the problem that makes it invalid,
        whether the read is complete, and the bytes taken."""
        body = pos + HEADER_BYTES
        if length & BATCH:
            table = batch_table(buf, body, record_end, length >= KEYED)
            if table is None:
                return "batch tables do not fit their record", False, taken
            if through is None:
                out.append((base + pos, base + record_end, tick, len(table[1])))
                return None, False, taken
            full, taken = _take_batch(buf, tick, table, self._keys, self._skip_through, through, bytes_max, out,
                                      taken)
            return None, full or tick + len(table[1]) - 1 > through, taken
        return self._keep_single(buf, base, pos, record_end, tick, length, out, through, bytes_max, taken)

    def _keep_single(self, buf: bytes, base: int, pos: int, record_end: int, tick: int, length: int,
                     out: list[Any], through: int | None, bytes_max: int, taken: int) -> tuple[str | None, bool, int]:
        """`_keep` for a single record."""
        body_end = _body_end(buf, record_end, length & LENGTH_MASK) if length >= KEYED else record_end
        if body_end < 0:
            return "key runs past its record", False, taken
        if through is None:
            out.append((base + pos, base + record_end, tick, 1))
            return None, False, taken
        if self._keys and body_end == record_end:  # an unkeyed record, when reading keys
            return None, False, taken
        data = buf[body_end:record_end - _KEY_LENGTH.size] if self._keys else buf[pos + HEADER_BYTES:body_end]
        if out and taken + len(data) > bytes_max:
            return None, True, taken
        out.append((tick, data))
        return None, taken + len(data) >= bytes_max, taken + len(data)

    def _settle(self, view: memoryview, offset: int, previous: int, problem: str | None) -> None:
        """End a chunk's parse: the scan stands at `offset`, after `previous`."""
        view.release()
        if problem is None and offset < self.end < offset + HEADER_BYTES:
            problem = "torn header"  # (a parse that stopped on a whole header never meets this)
        self.offset = offset
        self.previous_tick = previous
        self.problem = problem


def _take_batch(buf: bytes, first: int, table: tuple[int, tuple[int, ...], int, tuple[int, ...]], keys: bool,
                skip_through: int, through: int, bytes_max: int, out: list[Any], taken: int) -> tuple[bool, int]:
    """A log read's share of a checked batch record of `buf` whose first tick is `first`: the
    events (or with `keys`, the keys) with skip_through < tick <= through, while they fit the
    budget as `take` says. Returns whether the budget is spent, and the bytes taken."""
    data, ends, key_data, key_ends = table
    if keys:
        if not key_ends:
            return False, taken  # an unkeyed batch, when reading keys
        data, ends = key_data, key_ends
    append = out.append
    start = max(skip_through + 1 - first, 0)
    at = data + (ends[start - 1] if start else 0)
    for i in range(start, min(through + 1 - first, len(ends))):
        end = data + ends[i]
        if out and taken + end - at > bytes_max:
            return True, taken
        append((first + i, buf[at:end]))
        taken += end - at
        at = end
        if taken >= bytes_max:
            return True, taken
    return False, taken
