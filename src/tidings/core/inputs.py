"""Inputs to the broker core: facts the runtime reports, each stamped with `now`.

`now` is monotonic nanoseconds chosen by the runtime (virtual in the simulator). `Received` and
`TimerFired` also carry wall-clock microseconds, because the pubend derives ticks from the clock.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Accepted:
    now: int
    conn: int


@dataclass(frozen=True, slots=True)
class Received:
    now: int
    wall_us: int
    conn: int
    data: bytes


@dataclass(frozen=True, slots=True)
class ConnectionLost:
    now: int
    conn: int


@dataclass(frozen=True, slots=True)
class SendBlocked:
    """The connection's output queue passed `send_queue_bytes_max`."""

    now: int
    conn: int


@dataclass(frozen=True, slots=True)
class SendDrained:
    """The connection's output queue fell back below its low-water mark."""

    now: int
    conn: int


@dataclass(frozen=True, slots=True)
class LogState:
    """What the pubend log holds, as the storage reports it. `tick_marks`: at most TICK_MARKS - 1
    rising ticks of logged records that cut the retained log into TICK_MARKS runs of about equal
    bytes (STATUS reports them, so a Spark read can give its tasks equal shares of the events,
    however unevenly the events spread over the ticks)."""

    last_tick: int = 0
    first_tick: int | None = None
    released_through: int = 0
    log_bytes: int = 0
    record_count: int = 0
    tick_marks: tuple[int, ...] = ()


TICK_MARKS = 256  # the runs LogState.tick_marks cuts the retained log into (a Spark read's cuts)


@dataclass(frozen=True, slots=True)
class WriteSynced:
    """Every Append with a token <= `token` is on stable storage; `log` is the log after the sync."""

    now: int
    token: int
    log: LogState


@dataclass(frozen=True, slots=True)
class LogRead:
    """The answer to ReadLog: records with after < tick <= through, in order, possibly cut short;
    or, to a ReadLog with `span`, perhaps `span` instead (`records` then empty): `(covered, bytes)`,
    a run of whole records as logged that holds every record with after < tick <= covered, among
    others the reader must drop (storage/log.py `read_span`)."""

    now: int
    reader: int
    records: list[tuple[int, bytes]]
    log: LogState
    span: tuple[int, bytes] | None = None


@dataclass(frozen=True, slots=True)
class ReadFailed:
    """A ReadLog could not be answered (e.g. a corrupt segment); `reason` says why."""

    now: int
    reader: int
    reason: str


@dataclass(frozen=True, slots=True)
class PfsAnswered:
    """The answer to ReadPfs: for every tick t with max(after, released_through) < t <= through,
    t matched the registration iff t is in `ticks`; `through` < 0 when the read failed."""

    now: int
    reader: int
    ticks: tuple[int, ...]
    through: int
    released_through: int


@dataclass(frozen=True, slots=True)
class RetentionApplied:
    now: int
    log: LogState


@dataclass(frozen=True, slots=True)
class TimerFired:
    """A deadline passed; `wall_us` lets the pubend declare silence up to the present (0: unknown)."""

    now: int
    wall_us: int = 0


@dataclass(frozen=True, slots=True)
class Connected:
    """An outgoing connection asked for by `Connect(address)` is established as `conn`; what
    arrives on it comes as Received, its end as ConnectionLost (it is never reported as Accepted)."""

    now: int
    conn: int
    address: str


@dataclass(frozen=True, slots=True)
class ConnectFailed:
    """`Connect(address)` failed (refused, unreachable, timed out)."""

    now: int
    address: str
    reason: str


@dataclass(frozen=True, slots=True)
class DrainRequested:
    """Stop after draining (SIGTERM): advise every client to move, wait for them and for what is
    owed to other brokers, at most `timeout_ns`; then the core says `Drained` (core/broker/lifecycle.py)."""

    now: int
    timeout_ns: int


Input = (
    Accepted | Received | ConnectionLost | SendBlocked | SendDrained | WriteSynced | LogRead
    | ReadFailed | RetentionApplied | TimerFired | Connected | ConnectFailed | PfsAnswered | DrainRequested
)

# Kinds of input the composers test together, as tuples: `isinstance(inp, A | B)` builds its union
# again at every call, a few hundred ns on the path of every input.
CLOCKED = (Received, TimerFired)  # they carry the wall clock
DIALS = (Connected, ConnectFailed)  # the peer links' dials
ON_A_CONNECTION = (Received, ConnectionLost, SendBlocked, SendDrained)  # about one connection
SEND_FLOW = (SendBlocked, SendDrained)
