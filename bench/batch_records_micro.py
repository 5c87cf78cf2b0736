#!/usr/bin/env python3
"""Batch records against single records (storage/record.py), in one process: CPU time per event of
the log writer's encoding of an append, of a log read (`EventLog.read`, what nack answers and
durable catch-up do) and of a span's split (`record.records_in`, what a Spark task does), each for
the same events written as one batch record per append and as one single record per event (the
format before batch records). process_time per event, best of 5.

  python bench/batch_records_micro.py [--events-per-append 100] [--payload-bytes 150] [--appends 100]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import tempfile
import time
from collections.abc import Callable
from typing import Any

from tidings.storage import EventLog, record
from tidings.storage import log as log_module

FIRST_TICK = 1_764_000_000_000_000


def per_event_us(work: Callable[[], object], events: int, seconds: float = 0.3) -> float:
    """CPU µs per event of `work` (which handles `events` events), best of 5 runs of about `seconds`."""
    best = float("inf")
    for _ in range(5):
        calls, start = 0, time.process_time()
        while (spent := time.process_time() - start) < seconds or not calls:
            work()
            calls += 1
        best = min(best, spent / calls / events * 1e6)
    return best


def measure(per_append: int, payload_bytes: int, appends: int, batch: bool) -> dict[str, float]:
    appended = [[(FIRST_TICK + k * per_append + i, bytes([i % 256]) * payload_bytes) for i in range(per_append)]
                for k in range(appends)]
    encode = record.encode
    out = {"encode_us": per_event_us(lambda: encode(appended[0], 0, 0, 1 << 62, 1 << 16, batch=batch), per_append)}
    with tempfile.TemporaryDirectory() as directory:
        original = log_module.record.encode

        def unbatched(*args: Any, **kwargs: Any) -> tuple[bytes, list[tuple[int, int]]]:
            return original(*args, **(kwargs | {"batch": False}))

        if not batch:  # the log as it was written before batch records: one single record per event
            log_module.record.encode = unbatched  # type: ignore[assignment]
        try:
            with EventLog.open(pathlib.Path(directory)) as log:
                for records in appended:
                    log.append(records)
                log.sync()
                events = per_append * appends
                out["read_us"] = per_event_us(lambda: log.read(FIRST_TICK - 1, 1 << 40), events)
        finally:
            log_module.record.encode = original
    span = b"".join(encode(records, 0, 0, 1 << 62, 1 << 16, batch=batch)[0] for records in appended)
    out["records_in_us"] = per_event_us(lambda: record.records_in(span, 0, 1 << 62), per_append * appends)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events-per-append", type=int, default=100)
    ap.add_argument("--payload-bytes", type=int, default=150)
    ap.add_argument("--appends", type=int, default=100)
    args = ap.parse_args()
    single = measure(args.events_per_append, args.payload_bytes, args.appends, batch=False)
    batched = measure(args.events_per_append, args.payload_bytes, args.appends, batch=True)
    for name in single:
        print(json.dumps({"figure": name, "single_records": round(single[name], 3),
                          "batch_records": round(batched[name], 3),
                          "batch/single": round(batched[name] / single[name], 2)}))


if __name__ == "__main__":
    main()
