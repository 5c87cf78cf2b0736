"""What one consumer of an input stream is sent: its known ticks cut into pieces.

Theory of operation (Gryphon's knowledge messages, §3). A consumer of an `Istream` (istream.py) is
sent the ticks (sent_through, horizon] as soon as the doubt horizon passes its position: contiguous
knowledge, F and D ticks alike, so that a subscriber can deliver in tick order and a child forwards
what it has without waiting. `cut` turns such a range into `Piece`s, one message each:

- D ticks carry their records, at most `piece_bytes_max` bytes of records and RECORDS_MAX records in
  one piece (a larger record goes alone); everything else in a piece's range is F to the consumer;
- D ticks at or before the consumer's start, and those a child's filter summary does not match
  (`matches`, interest.py), are F to it: silence it does not need to ask about;
- each run of L ticks after the start (the pubend released them before this stream learnt them) is
  a piece of its own, `lost`: a gap for a subscriber, L for a child;
- the cut stops before the first D tick whose record the cache dropped (record_cache.py) and says
  which: the stream forgets it back to Q and nacks it, so the consumer is sent it later, in order.

A run of at least BULK_TICKS_MIN D ticks, unfiltered and past the start, is taken whole when it
fits the piece (the same piece the tick-by-tick loop would make, for less work per tick). The
stream hands over its runs of knowledge and its cached records: cutting reads nothing else, so on
an unfiltered path it is a leaf of the stream.

Invariants: the pieces are contiguous from `after` (each one's `after` is the previous one's
`through`) and end at most at `upper`; a piece that is not `lost` holds only D ticks after the start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, cast

from tidings.core.reliability.messages import RECORDS_PER_MESSAGE_MAX as RECORDS_MAX
from tidings.core.reliability.ticks import Knowledge, Run

BULK_TICKS_MIN = 8  # a run of D this long is taken into a piece at once (shorter: tick by tick is cheaper)

Matches = Callable[[int, bytes], bool]  # (tick, record): a child's summary matches it


@dataclass(slots=True)
class Piece:
    """Knowledge of (after, through] for one consumer: D at `ticks` (records alongside), F elsewhere;
    or, when `lost`, L everywhere (the pubend released those ticks: a gap for a subscriber)."""

    after: int
    through: int
    ticks: list[int] = field(default_factory=list)
    records: list[bytes] = field(default_factory=list)
    lost: bool = False


def cut(runs: Iterable[Run[Knowledge]], records: Mapping[int, bytes], after: int, start: int,
        piece_bytes_max: int, matches: Matches | None = None) -> tuple[list[Piece], int | None]:
    """Knowledge of (after, upper] (all known: its `runs`, KnowledgeMap.runs) for a consumer that
    starts at `start`, as the module says; with it the first D tick whose record is not in
    `records` (the cut stopped before it), or None."""
    pieces: list[Piece] = []
    piece = Piece(after, after)
    size = 0
    for lo, hi, value in runs:
        if value is Knowledge.L and hi > start:
            piece.through = max(lo, start)  # what it does not want is silence to it
            if piece.through > piece.after:
                pieces.append(piece)
            pieces.append(Piece(piece.through, hi, lost=True))
            piece, size = Piece(hi, hi), 0
            continue
        if value is not Knowledge.D:
            piece.through = hi
            continue
        if (matches is None and hi - lo >= BULK_TICKS_MIN and lo >= start
                and len(piece.ticks) + hi - lo <= RECORDS_MAX):
            # the whole run at once when it fits the piece (as the loop below would take it)
            got = list(map(records.get, range(lo + 1, hi + 1)))
            run = cast(list[bytes], got)  # when None is not in it (else the loop finds the drop)
            run_bytes = 0 if None in got else sum(map(len, run))
            if run_bytes and size + run_bytes <= piece_bytes_max:
                piece.ticks.extend(range(lo + 1, hi + 1))
                piece.records.extend(run)
                size += run_bytes
                piece.through = hi
                continue
        for tick in range(lo + 1, hi + 1):
            record = records.get(tick)
            if record is None:
                return _closed(pieces, piece), tick
            if tick > start and (matches is None or matches(tick, record)):
                if piece.ticks and (size + len(record) > piece_bytes_max or len(piece.ticks) >= RECORDS_MAX):
                    pieces.append(piece)
                    piece, size = Piece(piece.through, piece.through), 0
                piece.ticks.append(tick)
                piece.records.append(record)
                size += len(record)
            piece.through = tick
    return _closed(pieces, piece), None


class Arrival(NamedTuple):
    """Knowledge of (after, through] as it arrived at a stream, none of it known there before: D
    at `ticks` with `records` (`size` bytes of them), F at every other tick."""

    after: int
    through: int
    ticks: Sequence[int]
    records: Sequence[bytes]
    size: int | None  # None: not all of them were cached (not first-time news)


def whole(came: Arrival | None, after: int, upper: int, start: int, piece_bytes_max: int) -> Piece | None:
    """`came` as it arrived, when it is the one piece `cut` makes of (after, upper] for a consumer
    that starts at `start` (no filter: the caller's): the same range, none of it at or before the
    start, within a piece's bounds; else None (the cut runs)."""
    if (came is None or came.size is None or after != came.after or upper != came.through or start > after
            or came.size > piece_bytes_max or len(came.ticks) > RECORDS_MAX):
        return None
    return Piece(after, upper, list(came.ticks), list(came.records))


def first_dropped(runs: Iterable[Run[Knowledge]], records: Mapping[int, bytes]) -> int | None:
    """The first D tick of `runs` whose record is not in `records`, or None."""
    for lo, hi, value in runs:
        if value is Knowledge.D:
            for tick in range(lo + 1, hi + 1):
                if tick not in records:
                    return tick
    return None


def _closed(pieces: list[Piece], piece: Piece) -> list[Piece]:
    if piece.through > piece.after:
        pieces.append(piece)
    return pieces


__all__ = ["BULK_TICKS_MIN", "Arrival", "Matches", "Piece", "cut", "first_dropped", "whole"]
