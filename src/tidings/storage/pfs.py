"""The persistent filtering subsystem (PFS): which ticks of a pubend matched which durable subscriber.

Theory of operation (Gryphon durable, section 4.2)
-------------------------------------------------
The constream at a subscriber's broker delivers each pubend's ticks in order; for every tick that
matched at least one durable subscriber it writes ONE record: the tick and, for each matching
subscriber, its id and a back-pointer to that subscriber's previous matching record. A tick with no
record is S (silence) for every subscriber, so n subscribers cost one write per matching event, not
n, and nothing per silent tick. A catchup stream later asks "which ticks after CT(s, p) matched s?"
and gets them in one batch read, with the S ticks between them implied, instead of re-reading and
refiltering every event from the pubend.

One stream per pubend, as the paper's Log Volume holds one Log Stream per pubend: ticks rise per
pubend (not across pubends), chopping follows released(p), which differs per pubend, and a catchup
reads one (subscriber, pubend) stream at a time. Each stream is an `EventLog` (`log.py`) in its own
directory, so appends, fsync, torn-tail recovery and whole-segment removal are the event log's: the
record tick is the matching tick, the payload is this module's.

Record payload: msgpack array `[s1, d1, s2, d2, ...]` of subscriber ids (integers, ascending) each
followed by its back-pointer as a delta: the record's tick minus the subscriber's previous matching
tick, 0 when it has no earlier record still retained. Deltas keep the pointers to a few bytes.

Reads. `lastIndex(s)` of the paper is kept in memory (`_last_match`, rebuilt by one scan when the
stream opens; a chopped stream is short). A read for s after tick a walks the records in (a, last
match of s] forward in large chunks, in one pass, and stops there: a subscriber that matched nothing
since a costs no I/O at all. The back-pointers chain the subscriber's records; the read checks that
every record it returns points at the one before it, so a hole in the file is an error, never a
silently skipped event. Reads see only synced records: `last_timestamp` is the newest synced tick,
and a read's `through_tick` says up to where its answer is complete. `mark(t)` appends an empty
record (no subscriber) at t, so that after a quiet spell reads answer up to t, not only up to the
last match.

Chopping. `chop(t)` removes whole closed segments whose records are all at or below t (the minimum
over subscribers of released(s, p), and latestDelivered(p)); `released_through` then says below
which ticks the stream knows nothing. A read after a tick below it must treat the ticks up to it as
L for that subscriber (a gap, or refiltering from the pubend).

Threads: one writer (append, sync, chop, close) and any number of readers.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import threading
from collections.abc import Iterable
from dataclasses import dataclass

import msgpack

from tidings.storage.files import LogCorruptError, ensure_directory
from tidings.storage.log import EventLog

SUBSCRIBER_ID_MAX = (1 << 32) - 1
RECORD_SUBSCRIBERS_MAX = 1 << 16
SUBSCRIBERS_MAX = 1 << 20
READ_CHUNK_BYTES = 1 << 20
SEGMENT_BYTES_MAX_DEFAULT = 4 << 20
STREAM_PREFIX = "p-"
EMPTY_RECORD = msgpack.packb([])  # a `mark`: no subscriber matched, the stream is known up to its tick


@dataclass(frozen=True, slots=True)
class PfsRead:
    """One batch read's answer for one subscriber of one pubend.

    For every tick t with max(after_tick, released_through) < t <= through_tick, t matched the
    subscriber iff t is in `ticks` (ascending). Ticks above `through_tick` are not known yet (or
    were left for the next read, when `count_max` filled). Ticks at or below `released_through`
    were chopped: the PFS cannot say.
    """

    ticks: tuple[int, ...]
    through_tick: int
    released_through: int


def encode_record(matches: Iterable[tuple[int, int]]) -> bytes:
    """The payload for `(subscriber, back_delta)` pairs in ascending subscriber order."""
    return msgpack.packb([value for pair in matches for value in pair])


def back_delta_of(payload: bytes, subscriber: int) -> int | None:
    """The subscriber's back-pointer delta in a record, or None if the record does not list it."""
    values = msgpack.unpackb(payload)
    # Subscriber ids sit at even positions, ascending: a binary search would pay only for long records.
    for i in range(0, len(values), 2):
        if values[i] == subscriber:
            return int(values[i + 1])
        if values[i] > subscriber:
            return None
    return None


def _subscribers_of(payload: bytes) -> list[int]:
    values = msgpack.unpackb(payload)
    return list(values[0::2])


class PfsStream:
    """The PFS of one pubend. Use `PfsStream.open`."""

    def __init__(self, log: EventLog, last_match: dict[int, int]) -> None:
        self._log = log
        self._lock = threading.Lock()
        self._last_match = last_match
        self._synced_tick = log.last_tick

    @classmethod
    def open(cls, directory: pathlib.Path, *,
             segment_bytes_max: int = SEGMENT_BYTES_MAX_DEFAULT) -> PfsStream:
        """Open (creating if needed) a stream, cutting a torn tail and rebuilding lastIndex(s)."""
        log = EventLog.open(directory, segment_bytes_max=segment_bytes_max)
        last_match: dict[int, int] = {}
        after = 0
        try:
            while records := log.read(after, READ_CHUNK_BYTES):
                for tick, payload in records:
                    for subscriber in _subscribers_of(payload):
                        last_match[subscriber] = tick
                after = records[-1][0]
        except BaseException:
            log.close()
            raise
        return cls(log, last_match)

    @property
    def directory(self) -> pathlib.Path:
        return self._log.directory

    @property
    def last_timestamp(self) -> int:
        """The newest synced record's tick (the paper's lastTimestamp); 0 when none was written."""
        with self._lock:
            return self._synced_tick

    @property
    def released_through(self) -> int:
        return self._log.released_through

    @property
    def size_bytes(self) -> int:
        return self._log.size_bytes

    @property
    def subscriber_count(self) -> int:
        """Subscribers with a retained record (the memory lastIndex(s) takes)."""
        with self._lock:
            return len(self._last_match)

    def append(self, tick: int, subscribers: Iterable[int]) -> None:
        """Record that `tick` matched `subscribers` (and no one else). Durable after `sync`."""
        self.append_many([(tick, subscribers)])

    def append_many(self, entries: Iterable[tuple[int, Iterable[int]]]) -> None:
        """`append` for each (tick, subscribers) in order, as one write: ValueError (and nothing
        written) when an entry lists no subscriber, too many, or an id out of range."""
        records: list[tuple[int, bytes]] = []
        with self._lock:
            last = dict[int, int]()  # this batch's matches, over _last_match
            for tick, subscribers in entries:
                ids = sorted(set(subscribers))
                if not ids:
                    raise ValueError("a PFS record lists at least one matching subscriber")
                if len(ids) > RECORD_SUBSCRIBERS_MAX or not 0 <= ids[0] <= ids[-1] <= SUBSCRIBER_ID_MAX:
                    raise ValueError(f"a PFS record lists 1..{RECORD_SUBSCRIBERS_MAX} ids in 0..{SUBSCRIBER_ID_MAX}")
                pairs = []
                for s in ids:
                    previous = last.get(s) or self._last_match.get(s, 0)
                    pairs.append((s, tick - previous if previous else 0))
                    last[s] = tick
                records.append((tick, encode_record(pairs)))
            if len(self._last_match) + sum(1 for s in last if s not in self._last_match) > SUBSCRIBERS_MAX:
                raise ValueError(f"the PFS of a pubend tracks at most {SUBSCRIBERS_MAX} subscribers")
        if records:
            self._log.append(records)
        with self._lock:
            self._last_match.update(last)

    def mark(self, through: int) -> None:
        """Record that every tick up to `through` is known (silence after the last match): an
        empty record, so that reads after a sync answer up to it."""
        if through > self._log.last_tick:
            self._log.append([(through, EMPTY_RECORD)])

    def sync(self) -> None:
        """Make every appended record durable; reads see them from now on."""
        self._log.sync()
        last = self._log.last_tick
        with self._lock:
            self._synced_tick = last

    def chop(self, released_tick: int) -> int:
        """Discard records at or below `released_tick`, whole segments at a time; segments removed."""
        removed = self._log.release_through(released_tick)
        if removed:
            released = self._log.released_through
            with self._lock:
                self._last_match = {s: t for s, t in self._last_match.items() if t > released}
        return removed

    def read(self, subscriber: int, after_tick: int, count_max: int) -> PfsRead:
        """The ticks after `after_tick` that matched `subscriber`, at most `count_max`, in one pass."""
        assert count_max > 0
        with self._lock:
            synced = self._synced_tick
            last = min(self._last_match.get(subscriber, 0), synced)
        released = self._log.released_through
        ticks: list[int] = []
        previous: int | None = None
        cursor = after_tick
        while cursor < last:
            records = self._log.read(cursor, READ_CHUNK_BYTES, through_tick=last)
            if not records:
                break  # chopped under our feet: `released_through`, read after, says so
            for tick, payload in records:
                delta = back_delta_of(payload, subscriber)
                if delta is None:
                    continue
                pointed = tick - delta if delta else 0
                floor = max(after_tick, self._log.released_through)
                if pointed != previous if previous is not None else pointed > floor:
                    raise LogCorruptError(f"{self.directory}: record {tick} of subscriber {subscriber} "
                                          f"points at {pointed or 'nothing'}, the record before it "
                                          f"is {previous or 'at or below ' + str(after_tick)}")
                previous = tick
                ticks.append(tick)
                if len(ticks) == count_max and tick < last:
                    return PfsRead(tuple(ticks), tick, max(released, self._log.released_through))
            cursor = records[-1][0]
        return PfsRead(tuple(ticks), max(synced, after_tick), max(released, self._log.released_through))

    def close(self) -> None:
        self._log.close()


class Pfs:
    """The PFS volume of a subscriber's broker: one `PfsStream` per pubend, under one directory."""

    def __init__(self, directory: pathlib.Path, segment_bytes_max: int) -> None:
        self.directory = directory
        self._segment_bytes_max = segment_bytes_max
        self._streams: dict[str, PfsStream] = {}

    @classmethod
    def open(cls, directory: pathlib.Path, *, segment_bytes_max: int = SEGMENT_BYTES_MAX_DEFAULT) -> Pfs:
        directory = pathlib.Path(directory)
        ensure_directory(directory)
        pfs = cls(directory, segment_bytes_max)
        try:
            for name in sorted(os.listdir(directory)):
                pubend = _pubend_of(name)
                if pubend is not None:
                    pfs.stream(pubend)
        except BaseException:
            pfs.close()
            raise
        return pfs

    def pubends(self) -> list[str]:
        return sorted(self._streams)

    def stream(self, pubend: str) -> PfsStream:
        """The stream of `pubend`, opened or created on first use."""
        stream = self._streams.get(pubend)
        if stream is None:
            path = self.directory / (STREAM_PREFIX + pubend.encode().hex())
            stream = self._streams[pubend] = PfsStream.open(path, segment_bytes_max=self._segment_bytes_max)
        return stream

    def drop(self, name: str) -> None:
        """Remove the stream `name` and its files (it is no longer recorded)."""
        stream = self._streams.pop(name, None)
        if stream is not None:
            stream.close()
            shutil.rmtree(stream.directory, ignore_errors=True)

    def close(self) -> None:
        streams, self._streams = list(self._streams.values()), {}
        for stream in streams:
            stream.close()

    def __enter__(self) -> Pfs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _pubend_of(name: str) -> str | None:
    """The pubend a stream directory is named after, or None for any other entry."""
    if not name.startswith(STREAM_PREFIX):
        return None
    try:
        return bytes.fromhex(name[len(STREAM_PREFIX):]).decode()
    except ValueError:
        return None
