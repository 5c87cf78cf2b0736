"""The log written by the event loop and made durable by a thread that never takes the GIL.

Theory of operation
-------------------
With the Python writer thread (aio/storage_worker.py) a lone PUBLISH costs two GIL hand-offs: the
loop's queue put wakes the writer, which then waits for the GIL the loop holds, and the writer's
report wakes the loop again; about 6 context switches and 30 us per event at 1,000 events/s
(docs/benchmarks.md, "(d) above the disk's fsync"). Here the loop is the log's one writer: it
appends (a pwrite of the encoded records), applies retention and releases (rolls happen inside an
append), all in its own thread, so no two threads ever write the log. What it cannot do without
stalling everything else is wait for the fsync, so `EventLog.begin_sync` gives duplicates of the
descriptors to sync to the committer of `_commit.c`: a pthread that fsyncs them outside the
interpreter and writes an eventfd, which the loop watches (`add_reader`). The loop then takes the
result, counts it in the log (`end_sync`) and reports the sync through `on_synced`, in its own
thread: WriteSynced is fed there and then.

Group commit. One fsync is in flight at a time. A Sync that comes while one is in flight waits
(only the highest token is kept: tokens rise); when the fsync in flight finishes, the next one
begins at once, before the finished one is reported, covering everything appended meanwhile. So
an idle broker's first Sync starts its fsync with no delay, and under sustained load one fsync
covers every PUBLISH of the time the last one took, as the writer thread's group commit does.
The log state reported with a sync is taken when its fsync begins: it describes exactly the
records that fsync covers.

The states of a commit (`Commit`): IDLE (nothing in flight), IN_FLIGHT (one fsync submitted),
IN_FLIGHT with a token WAITING behind it; FAILED (an append, a sync or housekeeping raised: the
failure is reported once through `on_failed`, which stops the broker, and nothing is written or
reported after it); CLOSED (`close` waited for the fsync in flight and stopped the thread; its
result is not reported: the broker is stopping, and `EventLog.close` syncs what is left; whatever
the core still asks for is dropped, as the writer thread's queue drops work put after its stop).

What the broker's saves (SaveDurable, SaveDirectory) and reads need stays where it was: saves on
the worker's writer thread, reads on its reader pool.

The switch: `TIDINGS_NATIVE_COMMIT=0` keeps the Python writer thread (as does a tidings built
without `_commit.c`); `=1` asks for this path (`wanted`).
"""

from __future__ import annotations

import asyncio
import enum
import os
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from tidings.core.inputs import LogState
from tidings.storage import EventLog
from tidings.storage.log import SyncPlan

try:
    from tidings.aio import _commit  # the committer thread (setup.py): optional, Linux only
except ImportError:  # pragma: no cover - a build without the C extension
    _commit = None  # type: ignore[assignment]

P = ParamSpec("P")
R = TypeVar("R")
NATIVE_COMMIT_DEFAULT = False  # without TIDINGS_NATIVE_COMMIT: the Python writer thread (docs/benchmarks.md)


def available() -> bool:
    """Whether the committer was built (the C extension, Linux)."""
    return _commit is not None


def wanted(environ: dict[str, str] | None = None) -> bool:
    """Whether the broker commits natively: TIDINGS_NATIVE_COMMIT=1 or 0, else NATIVE_COMMIT_DEFAULT;
    never without the built committer."""
    value = (os.environ if environ is None else environ).get("TIDINGS_NATIVE_COMMIT")
    on = NATIVE_COMMIT_DEFAULT if value is None else value != "0"
    return on and available()


class Commit(enum.StrEnum):
    IDLE = "idle"
    IN_FLIGHT = "in-flight"
    FAILED = "failed"
    CLOSED = "closed"


_WRITING = (Commit.IDLE, Commit.IN_FLIGHT)  # the states in which the log is written and syncs reported


def _raise(exc: BaseException) -> None:
    raise exc


class NativeCommits:
    """The loop's side of the log: appends, housekeeping and group commit through `_commit.c`."""

    def __init__(self, log: EventLog, loop: asyncio.AbstractEventLoop, state_of: Callable[[EventLog], LogState],
                 on_synced: Callable[[int, LogState], object], on_failed: Callable[[BaseException], object]) -> None:
        """`on_synced(token, state)` and `on_failed(exc)` are called in the loop's thread; `state_of`
        is the state a sync reports (storage_worker.log_state)."""
        if _commit is None:
            raise RuntimeError("tidings.aio._commit is not built: the native commit is unavailable")
        self.log = log
        self._loop = loop
        self._state_of = state_of
        self._on_synced = on_synced
        self._on_failed = on_failed
        self._committer = _commit.Committer()
        self._watched: int | None = self._committer.fileno()  # the eventfd, while the loop watches it
        loop.add_reader(self._watched, self._finished)
        self.state = Commit.IDLE
        self._flight: tuple[int, LogState, SyncPlan] | None = None  # the token, state and plan in flight
        self._waiting: int | None = None  # the highest token asked for while one was in flight
        self.syncs = 0  # fsyncs finished
        self.sync_ns_total = 0  # their length in all, as the committer timed them
        self.last_sync_ns = 0  # the last one's

    # ---- what the worker hands over, in the loop's thread -----------------------------------------

    def append(self, records: list[tuple[int, bytes]], keys: list[bytes] | None) -> None:
        if self.state in _WRITING:
            self._guarded(self.log.append, records, keys)

    def sync(self, token: int) -> None:
        if self.state is Commit.IDLE:
            self._begin(token)
        elif self.state is Commit.IN_FLIGHT:
            self._waiting = token

    def housekeeping(self, work: Callable[[], bool], on_retained: Callable[[LogState], object]) -> None:
        """Retention or a release (`work` says whether it changed the log), then its report."""
        if self.state in _WRITING and self._guarded(work):
            on_retained(self._state_of(self.log))

    def close(self) -> None:
        """Stop watching, wait for the fsync in flight (its result is not reported), stop the thread."""
        if self._watched is not None:
            self._loop.remove_reader(self._watched)
            self._watched = None
        self._committer.close()
        self._flight = None
        self._waiting = None
        if self.state is not Commit.FAILED:
            self.state = Commit.CLOSED

    # ---- the commits ------------------------------------------------------------------------------

    def _begin(self, token: int) -> None:
        plan = self._guarded(self.log.begin_sync)
        if self.state is Commit.FAILED:
            return
        state = self._state_of(self.log)
        if plan is None:  # everything appended is durable already (a roll synced it): no fsync
            self._loop.call_soon(self._report, token, state)
            return
        fd, directory_fd = (plan.fd, plan.directory_fd) if plan.fd >= 0 else (plan.directory_fd, -1)
        try:
            self._committer.submit(token, fd, directory_fd, plan.data_only and plan.fd >= 0)
        except (RuntimeError, ValueError) as exc:  # not the committer's: the descriptors are still ours
            for mine in (fd, directory_fd):
                if mine >= 0:
                    os.close(mine)
            self._guarded(_raise, exc)
            return
        self._flight = (token, state, plan)
        self.state = Commit.IN_FLIGHT

    def _finished(self) -> None:
        """The eventfd is readable: the fsync in flight is done. The next one begins before this one
        is reported, so the disk works while the core handles WriteSynced."""
        done = self._committer.take()
        flight = self._flight
        if done is None or flight is None:
            return
        token, error, sync_ns = done
        _, state, plan = flight
        self._flight = None
        self.state = Commit.IDLE
        self._guarded(self.log.end_sync, plan, error)
        if self.state is Commit.FAILED:
            return
        self.syncs += 1
        self.sync_ns_total += sync_ns
        self.last_sync_ns = sync_ns
        if self._waiting is not None:
            waiting, self._waiting = self._waiting, None
            self._begin(waiting)
        self._report(token, state)

    def _report(self, token: int, state: LogState) -> None:
        if self.state in _WRITING:
            self._on_synced(token, state)

    def _guarded(self, work: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R | None:
        """`work`, or None with the failure reported once (a failing disk stops the broker)."""
        try:
            return work(*args, **kwargs)
        except Exception as exc:
            self.state = Commit.FAILED
            self._waiting = None
            self._on_failed(exc)
            return None
