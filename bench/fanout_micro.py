#!/usr/bin/env python3
"""A subscriber's broker's local side per delivery, in one process: the table of local subscriptions
(core/subscription/table.py) handing events to its subscriptions and framing them, without sockets.
CPU time (process_time) per delivery, best of 5.

  python bench/fanout_micro.py [--reps-deliveries 200000]

Two paths, each for a few shapes (subscriptions x records per call): `own`, this broker's own
events as a batch becomes durable (`LocalSubscriptions.synced`, test (b) of bench/run.py is its
10 x 100 at full speed), and `trees`, another pubend's records as the reliability node hands them
over (`LocalSubscriptions.delivered`, a `DeliverRecords`: what bench/gd_bench.py's subscriber's
broker does after its streams). Every subscription is live on `nodes/#` on a connection of its own
under sub id 1; records of 100-byte payloads without attributes on four channels. The API is the
current one's: to compare a change, run it in each checkout, one after the other, with PYTHONPATH
pointing at each one's src.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import msgpack

from tidings.core.auth.guard import Guard
from tidings.core.publish.pubend import PendingBatch
from tidings.core.reliability.node import DeliverRecords
from tidings.core.subscription.table import LocalSubscriptions

OWN, OTHER, START = "p-local", "p-remote", 1_700_000_000_000_000
SHAPES = ((1, 1), (1, 20), (1, 200), (10, 20), (10, 100))


def table(subs: int) -> LocalSubscriptions:
    t = LocalSubscriptions(Guard.open())
    for i in range(subs):
        s = t.open(10 + i, 1, OWN, "nodes/#", None, START, None, from_oldest=False, total=False, bulk=False,
                   spans=False)
        t.joined(s)
        t.advance(s, False, START, 1 << 20)  # caught up: live
    return t


def record(pubend: str, tick: int) -> bytes:
    return msgpack.packb([pubend, tick, f"nodes/h{tick % 4}/load", {}, "svc", "i", b"x" * 100])


def own(subs: int, records: int) -> Callable[[], object]:
    t = table(subs)
    ticks = range(START + 1, START + 1 + records)
    batch = PendingBatch(1, 1, 1, [], [(tick, f"nodes/h{tick % 4}/load", {}, record(OWN, tick)) for tick in ticks], 0)
    return lambda: t.synced([batch], OWN, START)  # through START: the positions stay there, the ticks past them


def trees(subs: int, records: int) -> Callable[[], object]:
    t = table(subs)
    deliver = DeliverRecords("nodes/#", tuple(t.subends), (OTHER,) * records,
                             [record(OTHER, START + 1 + k) for k in range(records)])
    return lambda: t.delivered(deliver)


def per_delivery_us(call: Callable[[], object], deliveries: int, reps_deliveries: int) -> float:
    reps = max(50, reps_deliveries // deliveries)
    best = float("inf")
    for _ in range(5):
        t0 = time.process_time()
        for _ in range(reps):
            call()
        best = min(best, (time.process_time() - t0) / reps / deliveries)
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps-deliveries", type=int, default=200_000, help="deliveries per timed repetition")
    args = ap.parse_args()
    for name, make in (("own", own), ("trees", trees)):
        for subs, records in SHAPES:
            us = per_delivery_us(make(subs, records), subs * records, args.reps_deliveries)
            print(f"{name:5} {subs:2} subscriptions x {records:3} records: {us:.3f} us per delivery")


if __name__ == "__main__":
    main()
