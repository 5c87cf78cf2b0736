"""The on-disk record format of the pubend's event log, and a scanner that validates it.

A record is a 16-byte header followed by its payload, all little-endian:

    offset 0   u32  length   body bytes (the header is not counted); the top bit marks a keyed record
    offset 4   u32  crc      zlib.crc32 of the 8 tick bytes followed by the body
    offset 8   u64  tick     the event's tick, >= 1
    offset 16  ...  body     the payload: opaque bytes (the broker's msgpack event array)

A keyed record (an idempotent publish, core/publish/dedup.py) has the top bit of `length` set and its body
is the payload, then the key, then the key's length as a u16: readers get the payload alone, and
recovery reads the keys of the log's tail without decoding any event.

Records follow each other with no padding. A record is valid when its whole extent lies inside the
bytes being scanned, its checksum matches, and its tick is greater than the tick before it. Those
three checks turn every shape a crash can leave at the end of a file into a clean stop: a header cut
short, a payload cut short, a length that points past the end (garbage), a zero-filled tail (a zero
tick is never greater than the previous one, and crc32 of eight zero bytes is not zero) and stale
bytes from an earlier life of the file (wrong checksum or a tick going backwards).
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

HEADER = struct.Struct("<IIQ")
HEADER_BYTES = HEADER.size
_TICK = struct.Struct("<Q")
KEYED = 1 << 31  # in `length`: the body ends with a key and its u16 length
LENGTH_MASK = KEYED - 1
PAYLOAD_BYTES_MAX = LENGTH_MASK
KEY_BYTES_MAX = 0xFFFF
_KEY_LENGTH = struct.Struct("<H")
SCAN_CHUNK_BYTES = 1 << 20


def checksum(tick_bytes: bytes | memoryview, payload: bytes | memoryview) -> int:
    return zlib.crc32(payload, zlib.crc32(tick_bytes))


def encode(records: Sequence[tuple[int, bytes]], after_tick: int, base_offset: int,
           next_index_offset: int, index_interval_bytes: int,
           keys: Sequence[bytes] | None = None) -> tuple[bytes, list[tuple[int, int]]]:
    """One buffer holding `records` (each keyed with the key at its index in `keys`, if given),
    and the sparse index entries `(tick, offset)` it adds.

    Ticks must rise strictly and exceed `after_tick`. The buffer will be written at `base_offset`;
    a record starting at or past `next_index_offset` gets an index entry, and the next entry is due
    `index_interval_bytes` after it. This runs once per event on the write path, under the GIL the
    event loop also needs, hence the local bindings and a single join.
    """
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


class SpanError(ValueError):
    """A span of log bytes (`records_in`) that does not hold valid whole records."""


def records_in(span: bytes, after: int, through: int) -> list[memoryview]:
    """The payload of each record of `span` with after < tick <= through, checksum checked, in order.

    `span` is a run of whole records as logged, copied from a log file (a READ answered with the
    log's bytes, core/wire/messages.py SPAN), and whoever holds it checks it as a scan of the file
    would: SpanError names the first record that is torn or out of tick order, or the first whose
    checksum fails among those returned. The reader's hot loop (a Spark task's), kept to one
    header unpack, one crc32 call and two views per record (no copy): the payloads are views of
    `span`.
    """
    payloads: list[memoryview] = []
    append, unpack, crc32 = payloads.append, HEADER.unpack_from, zlib.crc32
    view = memoryview(span)
    size, pos, previous = len(span), 0, 0
    try:
        while pos < size:
            length, crc, tick = unpack(span, pos)  # struct.error: a torn header
            record_end = pos + HEADER_BYTES + (length & LENGTH_MASK)
            if record_end > size or tick <= previous:
                raise SpanError(f"a record at byte {pos} of the span " + (
                    "runs past its end" if record_end > size else f"has tick {tick}, after {previous}"))
            if tick > after:
                if tick > through:
                    break
                if crc32(view[pos + 8:record_end]) != crc:  # the tick and payload are contiguous
                    raise SpanError(f"the record of tick {tick} fails its checksum")
                body_end = record_end if length < KEYED else _body_end(span, record_end, length & LENGTH_MASK)
                if body_end < 0:
                    raise SpanError(f"the record of tick {tick} has a key that runs past it")
                append(view[pos + HEADER_BYTES:body_end])
            previous, pos = tick, record_end
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

    Iterating yields `(offset, end_offset, tick, payload)` for each record after `skip_through`
    (with `keys=True`, the record's key, b"" for an unkeyed one, in place of the payload);
    earlier ones are walked over with their bounds and tick order checked but not their checksum (a
    reader that seeks with the sparse index passes up to 64 KiB this way). With `payloads=False` the
    payload is not copied out (b""). Iteration stops at `end` or at the first invalid record. Once
    it is exhausted, `offset` is where the valid prefix ends, `previous_tick` the last tick in it,
    and `problem` says why the scan stopped early (None when it reached `end`). `take` is the same
    walk for a log read, gathering `(tick, payload)` up to a tick and a byte budget in one loop.
    """

    __slots__ = ("_chunk_bytes", "_fd", "_keys", "_payloads", "_skip_through", "end", "offset", "previous_tick",
                 "problem")

    def __init__(self, fd: int, start: int, end: int, previous_tick: int, *, skip_through: int = 0,
                 payloads: bool = True, keys: bool = False, chunk_bytes: int = SCAN_CHUNK_BYTES) -> None:
        self._fd = fd
        self._keys = keys
        self._chunk_bytes = chunk_bytes
        self._skip_through = skip_through
        self._payloads = payloads
        self.offset = start
        self.end = end
        self.previous_tick = previous_tick
        self.problem: str | None = None

    def __iter__(self) -> Iterator[tuple[int, int, int, bytes]]:
        for buf in self._chunks():
            entries: list[Any] = []
            self._walk(buf, entries, None, 0, 0)
            yield from entries

    def take(self, out: list[tuple[int, bytes]], through_tick: int | None, bytes_max: int,
             taken: int) -> tuple[bool, int]:
        """Append `(tick, payload)` to `out` for each valid record after `skip_through` (checksum
        checked), up to `through_tick`, while the payloads fit in `bytes_max` with `taken` bytes
        already in `out` (the first record goes in whatever its size). Returns whether the read is
        complete (a record past `through_tick`, or the bytes spent) and the bytes now taken. The
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
        for `take`, `(tick, payload)` up to tick `through` and `bytes_max` (then whether the read
        is complete, and the bytes taken); for iteration (`through` None), `__iter__`'s tuples."""
        entry = self._entry if through is None else None
        through = (1 << 64) if through is None else through
        unpack, crc32, append = HEADER.unpack_from, zlib.crc32, out.append
        view = memoryview(buf)
        size = len(buf)
        base, pos, previous, skip_through = self.offset, 0, self.previous_tick, self._skip_through
        problem: str | None = None
        done = False
        while pos + HEADER_BYTES <= size:
            length, crc, tick = unpack(buf, pos)
            keyed = length & KEYED
            length &= LENGTH_MASK
            record_end = pos + HEADER_BYTES + length
            if record_end > size:
                if base + record_end > self.end:
                    problem = "record runs past the end"
                break  # else the next chunk starts with this record
            if tick <= previous:
                problem = f"tick {tick} does not follow {previous}"
                break
            if tick > skip_through:
                if tick > through:
                    done = True
                    break
                if crc32(view[pos + 8:record_end]) != crc:  # the tick and payload are contiguous
                    problem = "checksum mismatch"
                    break
                body_end = _body_end(buf, record_end, length) if keyed else record_end
                if body_end < 0:
                    problem = "key runs past its record"
                    break
                if entry is not None:
                    append(entry(buf, base, pos, record_end, tick, body_end))
                    previous, pos = tick, record_end
                    continue
                payload_bytes = body_end - pos - HEADER_BYTES
                if out and taken + payload_bytes > bytes_max:
                    done = True
                    break
                append((tick, buf[pos + HEADER_BYTES:body_end]))
                taken += payload_bytes
                if taken >= bytes_max:
                    done = True
                    previous, pos = tick, record_end
                    break
            previous = tick
            pos = record_end
        self._settle(view, base + pos, previous, problem)
        return done and problem is None, taken

    def _entry(self, buf: bytes, base: int, pos: int, record_end: int, tick: int,
               body_end: int) -> tuple[int, int, int, bytes]:
        """What iteration yields for the record at `pos` of `buf` (at `base`), its body ending at
        `body_end`: its offsets, tick, and its key (b"" when unkeyed) or payload (b"" if not asked)."""
        if self._keys:  # a keyed record's body ends before its record does
            data = buf[body_end:record_end - _KEY_LENGTH.size] if body_end < record_end else b""
        else:
            data = buf[pos + HEADER_BYTES:body_end] if self._payloads else b""
        return base + pos, base + record_end, tick, data

    def _settle(self, view: memoryview, offset: int, previous: int, problem: str | None) -> None:
        """End a chunk's parse: the scan stands at `offset`, after `previous`."""
        view.release()
        if problem is None and offset < self.end < offset + HEADER_BYTES:
            problem = "torn header"  # (a parse that stopped on a whole header never meets this)
        self.offset = offset
        self.previous_tick = previous
        self.problem = problem
