"""A span of the pubend's log read by the core: where each event's payload lies in the log's bytes.

Theory of operation. A nack's answer reads its range back as a span (storage/log.py `read_span`:
the log's own bytes, a run of whole records cut where the sparse index says a record begins, read
with one pread and no Python step per record). `payload_runs` walks it record by record, as
storage/record.py `records_in` does for a bulk reader, and returns, for each record holding ticks
of (after, through], its first tick in range and the offsets where that tick's payload and each
following one's begin, the last offset being where the last one ends: a batch record (one
PUBLISH's consecutive ticks, storage/record.py) is one run, its payloads lying back to back, so a
caller can take a whole run onto a tree without a Python step per event (source_knowledge.py
`KnowledgeWriter.span_events`). Every record returned is checked as a scan of the file checks it
(its extent, its tick order, its checksum, a batch's tables); a span that fails raises SpanError,
and its read fails as a read of a corrupt segment does.

The format is storage/record.py's (the core imports no runtime): a 16-byte header `<IIQ` (length
with the KEYED and BATCH bits, crc32 of the tick bytes and the body, tick), then the body; a batch
body is u32 count, `count` u32 payload ends, the payloads (a keyed batch then its keys' table); a
keyed single record's body ends with the key and its u16 length. tests/unit/test_log_span.py holds
`payload_runs` to `records_in` over logs written by storage/record.py (Hypothesis).
"""

from __future__ import annotations

import struct
import zlib

HEADER = struct.Struct("<IIQ")
HEADER_BYTES = HEADER.size
KEYED = 1 << 31
BATCH = 1 << 30
LENGTH_MASK = BATCH - 1
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")


class SpanError(ValueError):
    """A span of log bytes that does not hold valid whole records."""


def payload_runs(span: bytes, after: int, through: int) -> list[tuple[int, list[int]]]:
    """For each record of `span` with ticks in (after, through]: (its first tick in range, the
    offsets in `span` where that tick's payload and each following tick's begin, then where the
    last one ends). SpanError on a record that is torn, out of tick order, fails its checksum or
    has tables that do not fit it."""
    runs: list[tuple[int, list[int]]] = []
    unpack, crc32 = HEADER.unpack_from, zlib.crc32
    view = memoryview(span)
    size, pos, previous = len(span), 0, 0
    try:
        while pos < size:
            length, crc, tick = unpack(span, pos)
            record_end = pos + HEADER_BYTES + (length & LENGTH_MASK)
            if record_end > size or tick <= previous:
                raise SpanError(f"a record at byte {pos} of the span " + (
                    "runs past its end" if record_end > size else f"has tick {tick}, after {previous}"))
            ends = _batch_ends(span, pos + HEADER_BYTES, record_end, length >= KEYED) if length & BATCH else None
            last = tick + len(ends) - 2 if ends else tick
            if last > after:
                if tick > through:
                    break
                if crc32(view[pos + 8:record_end]) != crc:  # the tick and the body are contiguous
                    raise SpanError(f"the record of tick {tick} fails its checksum")
                runs.append(_run(span, pos, record_end, length, tick, ends, after, through))
                if last >= through:
                    break
            previous, pos = last, record_end
    except struct.error:
        raise SpanError(f"a torn header at byte {pos} of the span") from None
    return runs


def _run(span: bytes, pos: int, record_end: int, length: int, tick: int, ends: list[int] | None, after: int,
         through: int) -> tuple[int, list[int]]:
    """`payload_runs`' entry for the checked record at `pos` (`ends`: a batch's, `_batch_ends`)."""
    if ends is not None:
        first = max(after + 1 - tick, 0)
        return tick + first, ends[first:min(through + 1 - tick, len(ends) - 1) + 1]
    if length & BATCH:
        raise SpanError(f"the batch record of tick {tick} has tables that do not fit it")
    return tick, [pos + HEADER_BYTES, _body_end(span, record_end, length)]


def _batch_ends(buf: bytes, body: int, record_end: int, keyed: bool) -> list[int] | None:
    """The offsets in `buf` where each payload of the batch record whose body spans [body,
    record_end) begins, then where the last ends; None when its tables do not account for exactly
    the body's bytes."""
    count = _U32.unpack_from(buf, body)[0] if record_end - body >= 8 else 0
    data = body + 4 + 4 * count
    if count == 0 or data > record_end:
        return None
    ends = struct.unpack_from(f"<{count}I", buf, body + 4)
    keys = data + ends[-1] + 4 * count if keyed else record_end
    if list(ends) != sorted(ends) or keys > record_end or (not keyed and data + ends[-1] != record_end):
        return None
    if keyed:
        key_ends = struct.unpack_from(f"<{count}I", buf, keys - 4 * count)
        if list(key_ends) != sorted(key_ends) or keys + key_ends[-1] != record_end:
            return None
    return [data, *map(data.__add__, ends)]


def _body_end(buf: bytes, record_end: int, length: int) -> int:
    """Where the payload of the single record ending at `record_end` ends (a keyed one's before its key)."""
    if length < KEYED:
        return record_end
    body_bytes = length & LENGTH_MASK
    key_length = _U16.unpack_from(buf, record_end - _U16.size)[0] if body_bytes >= _U16.size else body_bytes
    if key_length + _U16.size > body_bytes:
        raise SpanError("a keyed record's key runs past it")
    return record_end - _U16.size - key_length
