#!/usr/bin/env python3
"""Test (a)'s broker core in one process: one broker in an overlay of its own (the root of its own
trees), one publisher, one live subscriber of the publisher's channel, without sockets, log or
fsync. CPU time (process_time) per event of everything the core does with it: the PUBLISH read and
decoded, the intake's pass, the sync's ACK, the local fan-out framed for the subscriber, and the
knowledge the pubend sends to its channel's trees (here to itself, their root). Best of `--reps`.

  python bench/single_broker_micro.py [--frames 10] [--batch 100] [--rounds 400] [--reps 5]

Each round the publisher sends `--frames` PUBLISHes of `--batch` events of 100 bytes (bench/loads.py's
(a) sends 100 a PUBLISH) and one sync makes them durable (a group commit of frames x batch events);
due timers fire after it. The frames are encoded before the clock starts, so the client's own work
is not counted. What bench/run.py's (a) adds on top (socket reads and writes, the log writer's
thread, fsync, the collector) is not here: compare two checkouts with this one for the core's
part, run one after the other with PYTHONPATH pointing at each one's src, and with bench/run.py
(broker CPU per event) for the whole.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from tidings.core.broker.broker import Broker
from tidings.core.config import BrokerConfig
from tidings.core.effects import Append, Effect, Send, Sync
from tidings.core.inputs import Accepted, Input, LogState, Received, TimerFired, WriteSynced
from tidings.core.session.client_session import ClientSession

CHANNEL = "bench/a"
PAYLOAD = b"x" * 100
WALL_US = 1_764_000_000_000_000


class OneBroker:
    """The broker core driven by hand: every Append is durable at the next `sync`."""

    def __init__(self) -> None:
        self.broker = Broker(BrokerConfig(), "p-micro", LogState())
        self.now = 1
        self.wall_us = WALL_US
        self.last_tick = 0
        self.logged = 0
        self.tokens: list[int] = []
        self.sent_bytes = 0
        self.apply(self.broker.start_overlay(0, "127.0.0.1:7400", None, random.Random(1)))

    def apply(self, effects: list[Effect]) -> None:
        for eff in effects:
            if type(eff) is Send:
                self.sent_bytes += len(eff.data)
            elif type(eff) is Append:
                self.last_tick = eff.records[-1][0]
                self.logged += len(eff.records)
            elif type(eff) is Sync:
                self.tokens.append(eff.token)

    def feed(self, inp: Input) -> None:
        self.apply(self.broker.handle(inp))

    def send(self, conn: int, data: bytes) -> None:
        self.wall_us += 50
        self.now += 50_000
        self.feed(Received(self.now, self.wall_us, conn, data))

    def sync(self) -> None:
        if self.tokens:
            token = self.tokens[-1]
            self.tokens.clear()
            self.feed(WriteSynced(self.now, token, LogState(self.last_tick, 1, 0, 0, self.logged)))
        while (due := self.broker.next_deadline()) is not None and due <= self.now:
            self.feed(TimerFired(self.now))


def rounds_of(publisher: ClientSession, rounds: int, frames: int, batch: int) -> list[list[bytes]]:
    """The PUBLISH frames of `rounds` rounds, encoded ahead."""
    return [[wire for _ in range(frames)
             for _, _, wire in publisher.publish([publisher.check_event(CHANNEL, PAYLOAD, {}) for _ in range(batch)])]
            for _ in range(rounds)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=10, help="PUBLISHes per sync")
    ap.add_argument("--batch", type=int, default=100, help="events per PUBLISH")
    ap.add_argument("--rounds", type=int, default=400, help="syncs per measured run")
    ap.add_argument("--reps", type=int, default=5, help="measured runs (the best is reported)")
    args = ap.parse_args()
    one = OneBroker()
    publisher, subscriber = ClientSession("svc", "pub"), ClientSession("svc", "sub")
    for conn, session in ((1, publisher), (2, subscriber)):
        one.feed(Accepted(one.now, conn))
        one.send(conn, session.hello())
    one.send(2, subscriber.subscribe(CHANNEL, None, "now", None)[1])
    for warm in rounds_of(publisher, 50, args.frames, args.batch):
        for wire in warm:
            one.send(1, wire)
        one.sync()
    runs: list[float] = []
    events = args.rounds * args.frames * args.batch
    for _ in range(args.reps):
        work = rounds_of(publisher, args.rounds, args.frames, args.batch)
        sent_before = one.sent_bytes
        start = time.process_time()
        for frames in work:
            for wire in frames:
                one.send(1, wire)
            one.sync()
        runs.append((time.process_time() - start) / events * 1e6)
        assert one.sent_bytes - sent_before > events * len(PAYLOAD), "the subscriber was not sent the events"
    print(json.dumps({"bench": "single_broker_micro", "frames": args.frames, "batch": args.batch,
                      "us_per_event_best": round(min(runs), 3), "us_per_event": [round(r, 3) for r in runs]}))


if __name__ == "__main__":
    main()
