"""The streaming read's offset: a checkpoint token's vector, as the JSON Spark stores.

Theory of operation. A durable subscription's position is the checkpoint token's vector
{pubend: tick} with a `default` tick for pubends it does not name (core/durable/checkpoint.py): "every
event of that pubend up to that tick was read, or did not match". A micro-batch is the events
between two such vectors, so the vector is the offset as it is. Spark writes it to its offset log
and compares offsets *as JSON strings*, so the JSON must be canonical: keys sorted at every level,
and positions at or below the default left out (they say nothing the default does not). Two
offsets that mean the same position are then the same string, and an unchanged source gives Spark
the very string it gave, which is how an AvailableNow query learns it is done.

The offset also carries `lost`: how many tick ranges released by retention the query has skipped
so far (with failOnDataLoss=false), and how many ticks they spanned. It only grows, and it is what
`query.lastProgress` shows of those skips.

    {"default": 1764000000000000, "lost": {"ranges": 0, "ticks": 0},
     "positions": {"3f2a…": 1764000000123456, "9c01…": 1764000000120000}}

Pure: no Spark, no broker, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tidings.core.durable.checkpoint import POSITIONS_MAX, Checkpoint
from tidings.core.event import TICK_MAX  # a tick is a Spark long


class OffsetError(ValueError):
    """An offset Spark handed back is not one this source wrote (a damaged checkpoint directory)."""


@dataclass(frozen=True, slots=True)
class Offset:
    default: int
    positions: Mapping[str, int] = field(default_factory=dict)  # only ticks above the default
    lost_ranges: int = 0
    lost_ticks: int = 0

    @classmethod
    def make(cls, default: int, positions: Mapping[str, int] | None = None, lost_ranges: int = 0,
             lost_ticks: int = 0) -> Offset:
        """The canonical offset: positions at or below the default dropped, the rest sorted."""
        kept = {p: t for p, t in sorted((positions or {}).items()) if t > default}
        return cls(default, kept, lost_ranges, lost_ticks)

    def position(self, pubend: str) -> int:
        return self.positions.get(pubend, self.default)

    def moved(self, positions: Mapping[str, int], lost_ranges: int = 0, lost_ticks: int = 0) -> Offset:
        """This offset with each pubend in `positions` moved up to its tick (never back), and the
        losses added."""
        merged = dict(self.positions)
        for pubend, tick in positions.items():
            if tick > self.position(pubend):
                merged[pubend] = tick
        return Offset.make(self.default, merged, self.lost_ranges + lost_ranges, self.lost_ticks + lost_ticks)

    def covers(self, other: Offset) -> bool:
        """Every pubend is at least as far here as in `other`."""
        return self.default >= other.default and all(
            self.position(p) >= t for p, t in other.positions.items())

    def to_json(self) -> dict[str, Any]:
        """The dict Spark serialises (json.dumps keeps insertion order: it is built sorted)."""
        return {
            "default": self.default,
            "lost": {"ranges": self.lost_ranges, "ticks": self.lost_ticks},
            "positions": dict(sorted(self.positions.items())),
        }

    @classmethod
    def from_json(cls, value: Any) -> Offset:
        """The offset of a dict `to_json` made; OffsetError naming what is wrong otherwise."""
        if type(value) is not dict or set(value) != {"default", "lost", "positions"}:
            raise OffsetError(f"a tidings offset is {{default, lost, positions}}, got {value!r:.200}")
        default, lost, positions = value["default"], value["lost"], value["positions"]
        if not _tick(default):
            raise OffsetError(f"a tidings offset's default is a tick, got {default!r}")
        if (type(lost) is not dict or set(lost) != {"ranges", "ticks"}
                or not all(_tick(v) for v in lost.values())):
            raise OffsetError(f"a tidings offset's lost is {{ranges, ticks}}, got {lost!r:.200}")
        if type(positions) is not dict or len(positions) > POSITIONS_MAX:
            raise OffsetError(f"a tidings offset's positions map at most {POSITIONS_MAX} pubends to ticks")
        for pubend, tick in positions.items():
            if not pubend or not _tick(tick):
                raise OffsetError(f"a tidings offset's position is pubend: tick, got {pubend!r}: {tick!r}")
        return cls.make(default, positions, lost["ranges"], lost["ticks"])

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint) -> Offset:
        return cls.make(checkpoint.default, checkpoint.positions)

    def to_checkpoint(self) -> Checkpoint:
        return Checkpoint(self.default, dict(self.positions))

    def token(self) -> str:
        """The offset as a checkpoint token (`tk1.`…), to start another query or a subscriber
        (`startingOffsets`, `subscribe(token=...)`) where this offset is."""
        return self.to_checkpoint().encode()


def _tick(value: object) -> bool:
    return type(value) is int and 0 <= value <= TICK_MAX
