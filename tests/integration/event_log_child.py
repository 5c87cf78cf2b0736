"""Child process of test_event_log_crash: appends batches to an event log until it is killed.

    python event_log_child.py DIR SEED SEGMENT_BYTES_MAX [PREFILL | native]

Prints `ready LAST_TICK` once the log is open, then after each completed `sync()` one line with the
ticks that sync made durable, flushed at once: a line the parent has read is an acknowledgement.
With PREFILL 1 it calls `prefill()` after every other sync, as the idle log writer does, so the
appends go over zeros and most syncs are fdatasyncs. With `native`, the broker's native commit
(aio/native_commit.py) does it: an event loop appends and asks for syncs without waiting (at most
PENDING_MAX batches not yet durable), the committer thread fsyncs, and each report prints the
batches it made durable.
"""

from __future__ import annotations

import asyncio
import pathlib
import random
import sys
import time
from typing import TextIO

from tidings.storage import EventLog

BATCHES_MAX = 1_000_000  # the parent kills us long before; the bound only stops a runaway child
PENDING_MAX = 16  # native: batches appended and not yet reported durable, at most


def payload_for(tick: int) -> bytes:
    """Checkable bytes whose size varies with the tick (0 to 299 bytes)."""
    stamp = tick.to_bytes(8, "little")
    size = tick % 300
    return (stamp * (size // 8 + 1))[:size]


def main(argv: list[str]) -> None:
    directory, seed, segment_bytes_max = pathlib.Path(argv[1]), int(argv[2]), int(argv[3])
    prefill = len(argv) > 4 and argv[4] == "1"
    rng = random.Random(seed)
    log = EventLog.open(directory, segment_bytes_max=segment_bytes_max)
    last = log.last_tick
    out = sys.stdout
    out.write(f"ready {last}\n")
    out.flush()
    if argv[4:] == ["native"]:
        asyncio.run(native(log, rng, last, out))
        return
    for _ in range(BATCHES_MAX):
        first = max(last + 1, time.time_ns() // 1000)
        ticks = range(first, first + rng.randint(1, 64))
        log.append([(tick, payload_for(tick)) for tick in ticks])
        log.sync()
        last = ticks[-1]
        out.write(" ".join(map(str, ticks)) + "\n")
        out.flush()
        if prefill and last % 2:
            log.prefill()


async def native(log: EventLog, rng: random.Random, last: int, out: TextIO) -> None:
    from tidings.aio.native_commit import NativeCommits
    from tidings.aio.storage_worker import log_state

    loop = asyncio.get_running_loop()
    pending: dict[int, range] = {}  # the batches appended, by the token of their sync
    failed: asyncio.Future[None] = loop.create_future()

    def synced(token: int, _state: object) -> None:
        for done in sorted(t for t in pending if t <= token):
            out.write(" ".join(map(str, pending.pop(done))) + "\n")
        out.flush()

    commits = NativeCommits(log, loop, log_state, synced, failed.set_exception)
    for _ in range(BATCHES_MAX):
        while len(pending) >= PENDING_MAX and not failed.done():
            await asyncio.sleep(0.0005)
        if failed.done():
            await failed
        first = max(last + 1, time.time_ns() // 1000)
        ticks = range(first, first + rng.randint(1, 64))
        commits.append([(tick, payload_for(tick)) for tick in ticks], None)
        pending[ticks[-1]] = ticks
        commits.sync(ticks[-1])
        last = ticks[-1]
        await asyncio.sleep(0)  # the loop's turn: the committer's report may be read


if __name__ == "__main__":
    main(sys.argv)
