"""Tick-map speed on the guaranteed-delivery hot path: one `accumulate` per knowledge message.

    python bench/bench_ticks.py --batches 200000

A stream receives consecutive single-event data messages, (previous, tick] with D at `tick`, ticks
7 microseconds apart (the pattern F*DF*D... a pubend's stream has under steady publishing). Three
figures, each the median of 5 rounds, as accumulates per second:

- `grow`: the map is never trimmed, so it ends with two runs per message (the worst case the
  stream's limits must bound);
- `acked`: every 1,000 messages the prefix is acked: `finalize` and `forget_through` as a stream does
  once a prefix is final and acked (their cost is included);
- `nack_answer`: the same messages, each accumulated a second time as a retransmission would be
  (every tick already known: the duplicate path).

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

from tidings.core.reliability.ticks import KnowledgeMap

STEP = 7
ACK_EVERY = 1000
ROUNDS = 5


def grow(batches: int) -> float:
    k = KnowledgeMap()
    start = time.perf_counter()
    tick = 0
    for _ in range(batches):
        k.accumulate(tick, tick + STEP, [tick + STEP])
        tick += STEP
    return batches / (time.perf_counter() - start)


def acked(batches: int) -> float:
    k = KnowledgeMap()
    start = time.perf_counter()
    tick = 0
    for n in range(1, batches + 1):
        k.accumulate(tick, tick + STEP, [tick + STEP])
        tick += STEP
        if n % ACK_EVERY == 0:
            k.finalize(0, tick)
            k.forget_through(tick)
    return batches / (time.perf_counter() - start)


def duplicates(batches: int) -> float:
    k = KnowledgeMap()
    for n in range(batches):
        k.accumulate(n * STEP, (n + 1) * STEP, [(n + 1) * STEP])
    start = time.perf_counter()
    for n in range(batches):
        k.accumulate(n * STEP, (n + 1) * STEP, [(n + 1) * STEP])
    return batches / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=200_000)
    args = parser.parse_args()
    result = {"python": platform.python_version(), "batches": args.batches}
    for name, run in (("grow", grow), ("acked", acked), ("nack_answer", duplicates)):
        result[f"{name}_per_s"] = round(statistics.median(run(args.batches) for _ in range(ROUNDS)))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
