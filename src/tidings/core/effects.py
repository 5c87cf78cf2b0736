"""Effects the broker core asks its runtime to carry out, in order.

A publish is acknowledged only by a Send that the core emits after the runtime reported
WriteSynced for its Append: "crash between write and fsync" is a state the simulator can reach.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Send:
    conn: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Disconnect:
    """Close the connection once what was sent before is flushed."""

    conn: int
    reason: str


@dataclass(frozen=True, slots=True)
class Append:
    """Write these records (tick, encoded event) to the pubend log; not durable until Sync."""

    token: int
    records: list[tuple[int, bytes]]


@dataclass(frozen=True, slots=True)
class Sync:
    """Make every Append up to `token` durable, then report WriteSynced (group commit allowed)."""

    token: int


@dataclass(frozen=True, slots=True)
class ReadLog:
    """Read records with after < tick <= through, at most about max_bytes; report LogRead."""

    reader: int
    after: int
    through: int
    max_bytes: int


Effect = Send | Disconnect | Append | Sync | ReadLog
