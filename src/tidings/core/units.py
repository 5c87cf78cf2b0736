"""Units, defined once: time in integer nanoseconds (`now`, every `..._ns` limit), stream time in
microseconds (a tick, a wall clock `..._us`), sizes in bytes.

A value changes unit in one place, through the converters below, never by an inline `// 1000`.
"""

from __future__ import annotations

from typing import Final

MICROSECOND_NS: Final = 1_000
MILLISECOND_NS: Final = 1_000_000
SECOND_NS: Final = 1_000_000_000
MINUTE_NS: Final = 60 * SECOND_NS
HOUR_NS: Final = 60 * MINUTE_NS

KIB: Final = 1024
MIB: Final = 1024 * KIB
GIB: Final = 1024 * MIB


def ns_to_us(ns: int) -> int:
    """Nanoseconds (a limit, a monotonic span) as microseconds (stream time), rounded down."""
    return ns // MICROSECOND_NS


def us_to_ns(us: int) -> int:
    return us * MICROSECOND_NS
