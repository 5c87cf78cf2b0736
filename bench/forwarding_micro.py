#!/usr/bin/env python3
"""A forwarder's guaranteed-delivery path per event, in one process: what the intermediate broker
of bench/gd_bench.py's overhead test does with each knowledge message from the publisher's broker
(decode it, accumulate it into the input stream and its cache, cut the pieces for its one child,
encode them, and take the child's ack, which empties the cache), without sockets. CPU time
(process_time) per event, by step.

  python bench/forwarding_micro.py [--messages 300] [--events 1000] [--run 100] [--gap 3] [--ack-lag 0]

Each message carries `--events` records of 100 bytes in runs of `--run` consecutive ticks with
`--gap` silent ticks between runs (a publisher's batches: publish_many gives a batch consecutive
ticks); `--run 1` spaces every event by `--gap`. The child acks what it was sent `--ack-lag`
messages before (0: everything, at once). Compare two checkouts on the same machine, one
after the other, with PYTHONPATH pointing at each one's src.
"""

from __future__ import annotations

import argparse
import time

import msgpack

from tidings.core.reliability import messages
from tidings.core.reliability.istream import Istream, StreamLimits

LIMITS = StreamLimits(cache_bytes_max=64 << 20, nack_ranges_max=64, nack_range_ticks_max=10**9,
                      piece_bytes_max=1 << 20)
CHILD = "child:1"


def wire_messages(count: int, events: int, run: int, gap: int) -> list[object]:
    record = msgpack.packb(["p1", 1, "bench/x", {}, "s", "i", b"x" * 100])
    out, tick = [], 0
    for _ in range(count):
        ticks = [tick + 1 + (k // run) * (run + gap) + k % run for k in range(events)]
        knowledge = messages.KnowledgeMessage("bench/#", "p1", tick, ticks[-1] + 1, tuple(ticks), (record,) * events,
                                              False)
        out.append(msgpack.unpackb(msgpack.packb(knowledge.to_wire())))  # as a peer's frame decodes
        tick = ticks[-1] + 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=300)
    ap.add_argument("--events", type=int, default=1000)
    ap.add_argument("--run", type=int, default=100)
    ap.add_argument("--gap", type=int, default=3)
    ap.add_argument("--ack-lag", type=int, default=0)
    args = ap.parse_args()
    ist = Istream("bench/#", "p1", 0, LIMITS)
    child = ist.attach(CHILD, 0)
    steps = dict.fromkeys(("decode", "accumulate", "pieces", "encode", "ack"), 0.0)
    clock = time.process_time
    sent = [0] * (args.ack_lag + 1)  # the child's sent_through after each of the last messages
    for wire in wire_messages(args.messages, args.events, args.run, args.gap):
        t0 = clock()
        k = messages.decode(wire)
        t1 = clock()
        ist.accumulate(k.after, k.through, k.ticks, k.records)
        t2 = clock()
        pieces = ist.pieces_for(child)
        t3 = clock()
        for p in pieces:
            msgpack.packb(["origin", messages.KnowledgeMessage(ist.tree, ist.pubend, p.after, p.through, tuple(p.ticks),
                                                        tuple(p.records), False, None, p.lost).to_wire()]
                          if not hasattr(messages, "knowledge_wire") else  # (before it existed)
                          ["origin", messages.knowledge_wire(ist.tree, ist.pubend, p.after, p.through, p.ticks,
                                                             p.records, False, None, p.lost)])
        t4 = clock()
        sent = [*sent[1:], child.sent_through]
        ist.acked(CHILD, sent[0], 0, 0)
        t5 = clock()
        for name, span in zip(steps, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4), strict=True):
            steps[name] += span
    events = args.messages * args.events
    print(" ".join(f"{name} {1e6 * s / events:.3f}" for name, s in steps.items()),
          f"total {1e6 * sum(steps.values()) / events:.3f} us/event")


if __name__ == "__main__":
    main()
