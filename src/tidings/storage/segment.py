"""One segment file of the pubend's event log: its name, its in-memory summary and sparse index.

A segment holds a run of consecutive records (see `record.py`) and is named after the tick of its
first record, zero-padded to 20 digits (as many as a u64 can need) so that lexical order is tick
order, e.g. `00001732240000000000.seg`.

The summary (`size`, `last_tick`, `record_count`: events, a batch record counting its events) and
the sparse index (one `(tick, offset)` entry for the first record and then for the first record at
least `INDEX_INTERVAL_BYTES` past the previous entry) describe only records whose bytes are fully
written: the writer publishes them, under the log's lock, after its write returned. `size` is
therefore the visible end: a reader that stops there never sees half a record.

When a segment is closed (the log rolls past it) its data is fsynced and then its summary and
index are saved beside it in `<first tick>.idx`, so that opening a large log scans only the newest
segment. The summary file is a cache: it carries a checksum and the segment's byte size, it is not
fsynced, and a missing, torn or stale one just means the segment is scanned (and the file rewritten).
Its layout, little-endian: `b"TIDX"`, u32 version, u64 first_tick, u64 size, u64 last_tick,
u64 record_count, u64 entry count, the entries as (u64 tick, u64 offset) pairs, u32 crc32 of all
the bytes before it.

Readers `pin` a segment before reading through its cached read descriptor; retention and close mark
a segment `retired` and the descriptor is closed by whoever drops the last pin, so a descriptor is
never closed (and its number never reused) under a reader's feet.
"""

from __future__ import annotations

import os
import pathlib
import struct
import zlib
from bisect import bisect_right
from dataclasses import dataclass

from tidings.storage.files import write_all
from tidings.storage.record import RecordScanner

SUFFIX = ".seg"
SUMMARY_SUFFIX = ".idx"
_SUMMARY_HEAD = struct.Struct("<4sIQQQQQ")
_SUMMARY_MAGIC = b"TIDX"
_SUMMARY_VERSION = 1
_CRC = struct.Struct("<I")
NAME_DIGITS = 20
INDEX_INTERVAL_BYTES = 64 << 10


def segment_name(first_tick: int) -> str:
    assert 0 < first_tick < 10**NAME_DIGITS
    return f"{first_tick:0{NAME_DIGITS}d}{SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """The first tick a segment file name encodes, or None for a name that is not a segment's."""
    stem = name[:-len(SUFFIX)]
    if not name.endswith(SUFFIX) or len(stem) != NAME_DIGITS or not stem.isdigit():
        return None
    tick = int(stem)
    return tick if tick > 0 else None


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """What `tidings status` shows about one segment."""

    first_tick: int
    last_tick: int
    size_bytes: int
    record_count: int
    name: str


class Segment:
    __slots__ = ("first_tick", "index_offsets", "index_ticks", "last_tick", "path", "pins", "read_fd",
                 "record_count", "retired", "size")

    def __init__(self, path: pathlib.Path, first_tick: int, read_fd: int) -> None:
        self.path = path
        self.first_tick = first_tick
        self.read_fd = read_fd
        self.size = 0
        self.last_tick = 0
        self.record_count = 0
        self.index_ticks: list[int] = []
        self.index_offsets: list[int] = []
        self.pins = 0
        self.retired = False

    @property
    def next_index_offset(self) -> int:
        return self.index_offsets[-1] + INDEX_INTERVAL_BYTES if self.index_offsets else 0

    def extend(self, end: int, last_tick: int, count: int, entries: list[tuple[int, int]]) -> None:
        """Publish records fully written up to `end` (call under the log's lock)."""
        assert end > self.size and last_tick > self.last_tick and count > 0
        for tick, offset in entries:
            self.index_ticks.append(tick)
            self.index_offsets.append(offset)
        self.size = end
        self.last_tick = last_tick
        self.record_count += count

    def start_for(self, after_tick: int) -> tuple[int, int]:
        """Where a scan for the first record after `after_tick` starts, and the tick before it.

        The entry chosen is the last one whose tick is <= after_tick + 1: every record before it
        has a smaller tick, so none of them can qualify.
        """
        i = bisect_right(self.index_ticks, after_tick + 1) - 1
        if i < 0:
            return 0, 0
        return self.index_offsets[i], self.index_ticks[i] - 1

    def unpin(self) -> int | None:
        """A reader is done with the segment: the descriptor to close, if that was the last use of a
        retired segment (call under the lock)."""
        self.pins -= 1
        return self.release_fd_if_unused()

    def release_fd_if_unused(self) -> int | None:
        """The descriptor to close once the segment is retired and unpinned (call under the lock)."""
        assert self.pins >= 0, "a segment was unpinned more often than pinned"
        if self.retired and self.pins == 0 and self.read_fd >= 0:
            fd, self.read_fd = self.read_fd, -1
            return fd
        return None

    @property
    def summary_path(self) -> pathlib.Path:
        return self.path.with_suffix(SUMMARY_SUFFIX)

    def info(self) -> SegmentInfo:
        return SegmentInfo(self.first_tick, self.last_tick, self.size, self.record_count, self.path.name)


def load_segment(segment: Segment, file_bytes: int, previous_tick: int) -> str | None:
    """Scan the whole file, filling the summary and index; the reason it stopped early, if it did.

    On a problem `segment.size` is the end of the valid prefix. The first record must carry the tick
    the file is named after.
    """
    scanner = RecordScanner(segment.read_fd, 0, file_bytes, previous_tick)
    next_index = 0
    for offset, end, tick, count in scanner:
        if segment.record_count == 0 and tick != segment.first_tick:
            return f"first record has tick {tick}, the name says {segment.first_tick}"
        if offset >= next_index:
            segment.index_ticks.append(tick)
            segment.index_offsets.append(offset)
            next_index = offset + INDEX_INTERVAL_BYTES
        segment.size = end
        segment.last_tick = tick + count - 1
        segment.record_count += count
    return scanner.problem


def open_read_fd(path: pathlib.Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_CLOEXEC)


def encode_summary(segment: Segment) -> bytes:
    entries = len(segment.index_ticks)
    body = bytearray(_SUMMARY_HEAD.pack(_SUMMARY_MAGIC, _SUMMARY_VERSION, segment.first_tick, segment.size,
                                        segment.last_tick, segment.record_count, entries))
    pairs = [value for pair in zip(segment.index_ticks, segment.index_offsets, strict=True) for value in pair]
    body += struct.pack(f"<{2 * entries}Q", *pairs)
    body += _CRC.pack(zlib.crc32(body))
    return bytes(body)


def write_summary(segment: Segment) -> None:
    """Save a closed segment's summary and index (a cache: not fsynced, checked when loaded)."""
    fd = os.open(segment.summary_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, encode_summary(segment), 0)
    finally:
        os.close(fd)


def load_summary(segment: Segment, file_bytes: int) -> bool:
    """Fill an unscanned segment from its summary file; False when there is none that fits."""
    assert segment.record_count == 0
    try:
        data = segment.summary_path.read_bytes()
    except FileNotFoundError:
        return False
    if len(data) < _SUMMARY_HEAD.size + _CRC.size:
        return False
    if _CRC.unpack_from(data, len(data) - _CRC.size)[0] != zlib.crc32(memoryview(data)[:-_CRC.size]):
        return False
    magic, version, first_tick, size, last_tick, record_count, entries = _SUMMARY_HEAD.unpack_from(data)
    fits = (
        (magic, version) == (_SUMMARY_MAGIC, _SUMMARY_VERSION)
        and (first_tick, size) == (segment.first_tick, file_bytes)
        and len(data) == _SUMMARY_HEAD.size + 16 * entries + _CRC.size
        and entries > 0 and record_count > 0 and last_tick >= first_tick
    )
    if not fits:
        return False
    values = struct.unpack_from(f"<{2 * entries}Q", data, _SUMMARY_HEAD.size)
    segment.index_ticks = list(values[0::2])
    segment.index_offsets = list(values[1::2])
    if segment.index_ticks[0] != first_tick or segment.index_offsets[0] != 0:
        segment.index_ticks, segment.index_offsets = [], []
        return False
    segment.size = size
    segment.last_tick = last_tick
    segment.record_count = record_count
    return True
