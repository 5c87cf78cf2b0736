"""Idempotent publish: its cost on the publish path and the restart that rebuilds the dedup window.

    .venv/bin/python bench/idempotent_bench.py [--events 200000] [--batch 500]

Publishes `--events` events in `publish_many` batches to a fresh broker process, once plain and
once with a producer id (one entry per batch), then replays every idempotent batch (all duplicates),
then kills the broker with kill -9 and times its restart (the log's tail is read to rebuild the
window; `restart_plain_s` is the same after the plain phase alone) and one more replay. Prints one
JSON line.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import tempfile
import time

from tidings import sync
from tidings.testing import BrokerProcess


def timed_publish(address: str, batches: list[list[tuple]], producer: str | None) -> tuple[float, int]:
    dups = 0
    with sync.connect(address, service="bench", follow_advice=False) as c:
        start = time.perf_counter()
        for items in batches:
            results = c.publish_many(items, producer=producer)
            dups += sum(r.duplicate for r in results)
        return time.perf_counter() - start, dups


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=500)
    args = ap.parse_args()
    n, size = args.events, args.batch
    plain = [[("bench/plain", b"x" * 100, None) for _ in range(size)] for _ in range(n // size)]
    keyed = [[("bench/keyed", b"x" * 100, None, b * size + k) for k in range(size)] for b in range(n // size)]
    out: dict[str, float | int] = {"events": n, "batch": size}
    with tempfile.TemporaryDirectory() as d:
        broker = BrokerProcess(pathlib.Path(d) / "b").start()
        try:
            t, _ = timed_publish(broker.address, plain, None)
            out["plain_events_per_s"] = round(n / t)
            broker.kill()  # the baseline: a restart with nothing to rebuild
            start = time.perf_counter()
            broker.start()
            out["restart_plain_s"] = round(time.perf_counter() - start, 3)
            t, _ = timed_publish(broker.address, keyed, "bench-producer")
            out["idempotent_events_per_s"] = round(n / t)
            t, dups = timed_publish(broker.address, keyed, "bench-producer")
            out["duplicates_per_s"] = round(n / t)
            out["duplicates"] = dups
            broker.kill()
            start = time.perf_counter()
            broker.start()
            out["restart_keyed_s"] = round(time.perf_counter() - start, 3)
            t, dups = timed_publish(broker.address, keyed, "bench-producer")
            out["duplicates_after_restart"] = dups
            out["dedup_entries"] = broker.status()["dedup_entries"]
        finally:
            broker.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
