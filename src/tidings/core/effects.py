"""Effects the broker core asks its runtime to carry out, in order.

A publish is acknowledged only by a Send that the core emits after the runtime reported
WriteSynced for its Append: "crash between write and fsync" is a state the simulator can reach.
"""

from __future__ import annotations

from collections.abc import Sequence
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
class PauseReading:
    """Stop reading from this connection (its publishes wait for the disk to catch up)."""

    conn: int


@dataclass(frozen=True, slots=True)
class ResumeReading:
    conn: int


@dataclass(frozen=True, slots=True)
class Append:
    """Write these records (tick, encoded event) to the pubend log; not durable until Sync.
    `keys`, when given, holds one dedup key per record, stored beside it (core/publish/dedup.py)."""

    token: int
    records: Sequence[tuple[int, bytes]]  # a list, or the intake's columns (core/publish/batch.py RecordRun)
    keys: list[bytes] | None = None


@dataclass(frozen=True, slots=True)
class Sync:
    """Make every Append up to `token` durable, then report WriteSynced (group commit allowed)."""

    token: int


@dataclass(frozen=True, slots=True)
class ReadLog:
    """Read records with after < tick <= through, at most about max_bytes; report LogRead. With
    `span`, the answer may be the log's own bytes for a prefix of the range (LogRead.span)."""

    reader: int
    after: int
    through: int
    max_bytes: int
    span: bool = False


@dataclass(frozen=True, slots=True)
class ReleaseLog:
    """The release protocol lets the pubend log drop its prefix through `through`: remove the whole
    closed segments at or below it, then report RetentionApplied."""

    through: int


@dataclass(frozen=True, slots=True)
class SaveDurable:
    """Replace the saved state of the durable subscriptions this broker hosts with `data` (atomically,
    in the data directory); handed back to the broker when it starts again. `before_replies`: the
    effects after this one (a SUBSCRIBED naming a new registration) may not reach anyone before the
    state is on disk, as an ack waits for its log fsync."""

    data: bytes
    before_replies: bool = False


@dataclass(frozen=True, slots=True)
class SaveDirectory:
    """Replace the saved pubend directory (core/broker/directory.py) with `data` (atomically, in the data
    directory); handed back to the broker when it starts again."""

    data: bytes


@dataclass(frozen=True, slots=True)
class PfsAppend:
    """Record in the persistent filtering subsystem's stream `stream` that each (tick, registrations)
    of `entries` matched those durable registrations and nothing else did, through tick `through`
    (reliability/constream.py). Ticks rise per stream; reads see it once the runtime synced it."""

    stream: str
    entries: list[tuple[int, list[int]]]
    through: int


@dataclass(frozen=True, slots=True)
class PfsChop:
    """The PFS stream `stream` may drop its records at or below `through` (whole segments); with
    `through` None the stream is no longer recorded and goes entirely."""

    stream: str
    through: int | None


@dataclass(frozen=True, slots=True)
class ReadPfs:
    """Read which ticks after `after` matched durable registration `registration` in PFS stream
    `stream`, at most `count_max`; report PfsAnswered for `reader`."""

    reader: int
    stream: str
    registration: int
    after: int
    count_max: int


@dataclass(frozen=True, slots=True)
class Connect:
    """Open a TCP connection to another broker at `address` (host:port); the runtime picks the
    connection number and reports Connected or ConnectFailed."""

    address: str


@dataclass(frozen=True, slots=True)
class PeerRefused:
    """A peer link was refused in its handshake (core/links/peer_links.py), already counted in the status:
    for the runtime to log, rate-limited. `side` is "acceptor" when this broker refused the
    connection `conn` that dialled it (`address`: what the dialler announced, "" if nothing
    readable), "dialler" when the broker we dialled at `address` refused us or failed our check.
    `reason` is one of peer_refusals.REFUSAL_REASONS; `detail` says it in a sentence."""

    conn: int
    address: str
    side: str
    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class ApplyRetention:
    """Drop the log's oldest whole segments while it holds more than `bytes_max` or their newest
    record is older than `age_us` before `now_us` (wall clock); report RetentionApplied
    (core/broker/lifecycle.py)."""

    now_us: int
    bytes_max: int
    age_us: int


@dataclass(frozen=True, slots=True)
class JoinTimedOut:
    """The broker is not in the overlay `timeout_ns` after it began joining through `address`: stop
    rather than run on alone. `attempts_failed` reaches of the address failed, the last for `last_failure`."""

    address: str
    timeout_ns: int
    attempts_failed: int
    last_failure: str


@dataclass(frozen=True, slots=True)
class Drained:
    """The drain is over (its waits ended, or its deadline passed) after `elapsed_ns`: stop now.
    `clients_left`: clients that could move and did not; `owed`: trees or batches still owed."""

    elapsed_ns: int
    clients_left: int
    owed: int


Effect = (Send | Disconnect | PauseReading | ResumeReading | Append | Sync | ReadLog | ReleaseLog | SaveDurable
          | SaveDirectory | Connect | PfsAppend | PfsChop | ReadPfs | PeerRefused | ApplyRetention | JoinTimedOut
          | Drained)


def coalesce_sends(effects: list[Effect]) -> list[Effect]:
    """The same effects with each connection's Sends joined into one, so a runtime writes to a
    connection once per input however many frames the core produced. A connection's joined Send
    comes just before its Disconnect, else after every other effect; other effects keep their
    order (moving a Send later is always safe: acknowledgements already wait for WriteSynced)."""
    pending: dict[int, list[bytes]] = {}
    out: list[Effect] = []
    for eff in effects:
        if type(eff) is Send:
            if eff.conn in pending:
                pending[eff.conn].append(eff.data)
            else:
                pending[eff.conn] = [eff.data]
            continue
        if type(eff) is Disconnect and eff.conn in pending:
            out.append(_joined(eff.conn, pending.pop(eff.conn)))
        out.append(eff)
    out.extend(_joined(conn, chunks) for conn, chunks in pending.items())
    return out


def _joined(conn: int, chunks: list[bytes]) -> Send:
    return Send(conn, chunks[0] if len(chunks) == 1 else b"".join(chunks))
