"""Child process of test_event_log_crash: appends batches to an event log until it is killed.

    python event_log_child.py DIR SEED SEGMENT_BYTES_MAX [PREFILL]

Prints `ready LAST_TICK` once the log is open, then after each completed `sync()` one line with the
ticks that sync made durable, flushed at once: a line the parent has read is an acknowledgement.
With PREFILL 1 it calls `prefill()` after every other sync, as the idle log writer does, so the
appends go over zeros and most syncs are fdatasyncs.
"""

from __future__ import annotations

import pathlib
import random
import sys
import time

from tidings.storage import EventLog

BATCHES_MAX = 1_000_000  # the parent kills us long before; the bound only stops a runaway child


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


if __name__ == "__main__":
    main(sys.argv)
