"""Silence that is one consumer's only: the F ticks a catchup's PFS answer made (Istream.sparsen).

A durable subscription catching up asks the persistent filtering subsystem which ticks of a span
matched it; the stream makes the other unknown ticks there F, so that only the matching ones are
nacked and fetched. That F is true for that consumer alone, below every other consumer's position.
`SparseSilence` remembers which F ticks are such: a consumer that later wants ticks there (attach,
rewind) doubts them again (`take`), and once every consumer is past them they are ordinary
(`release_below`). Plain data with no effects; the stream owns the knowledge map it corrects.

A forwarder makes such silence too: a child's *complete* nack (messages.py `Nack.complete`) names
every tick of its span the child lacks, so when the nack takes the stream below its floor only
those ticks become unknown and are fetched; the rest, which the child knows, is marked here
(Istream.rewind_complete). Such silence is never sent to a child (`holes`): the pieces a child is
sent skip the marked runs, since a child that lacks a tick there (it doubted its own knowledge
after nacking) must get it, never F: it nacks it again, and the tick is doubted and fetched.

Invariant: every marked tick is at or below `through`; `through` is 0 when nothing is marked.
"""

from __future__ import annotations

from tidings.core.reliability.pieces import Piece
from tidings.core.reliability.ticks import Range, TickMap


class SparseSilence:
    __slots__ = ("_marked", "through")

    def __init__(self) -> None:
        self.through = 0  # F ticks up to here may be one consumer's, not the stream's
        self._marked: TickMap[bool] = TickMap(False)  # which F ticks are such (never sent to anyone)

    def mark(self, ranges: list[Range]) -> None:
        for lo, hi in ranges:
            self._marked.assign(lo, hi, True)
            self.through = max(self.through, hi)

    def take(self, position: int, through: int) -> list[Range]:
        """The marked runs of (position, through], no longer marked: a consumer wants those ticks."""
        through = min(through, self.through)
        if position >= through:
            return []
        runs = [(lo, hi) for lo, hi, sparse in self._marked.runs(position, through) if sparse]
        for lo, hi in runs:
            self._marked.assign(lo, hi, False)
        return runs

    def holes(self, sent: list[Piece]) -> list[Piece]:
        """`sent` (contiguous pieces for a child) without the marked runs: a piece is cut around
        each (they hold F ticks only), one inside a run is dropped."""
        if not sent or sent[0].after >= self.through:
            return sent
        out: list[Piece] = []
        for piece in sent:
            runs = [] if piece.lost or piece.after >= self.through else [(lo, hi) for lo, hi, marked in
                                          self._marked.runs(piece.after, min(piece.through, self.through)) if marked]
            if not runs:
                out.append(piece)
                continue
            start, i = piece.after, 0
            for lo, hi in [*runs, (piece.through, piece.through)]:
                if lo > start:
                    j = i
                    while j < len(piece.ticks) and piece.ticks[j] <= lo:
                        j += 1
                    out.append(Piece(start, lo, piece.ticks[i:j], piece.records[i:j]))
                    i = j
                while i < len(piece.ticks) and piece.ticks[i] <= hi:
                    i += 1
                start = hi
        return out

    def unmark(self, after: int, through: int) -> None:
        """(after, through] became unknown (a lowered floor): none of it is such silence any more."""
        if self.through:
            self._marked.assign(after, through, False)

    def release_below(self, point: int) -> None:
        """Every consumer is past `point`: what is at or below it is the stream's own knowledge."""
        if self.through:
            self._marked.assign(0, point, False)
            if point >= self.through:
                self.through = 0


__all__ = ["SparseSilence"]
