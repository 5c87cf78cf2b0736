#!/usr/bin/env python3
"""The pubend's answer to a nack, per retransmitted event, in one process: what the publisher's
broker of bench/catchup_bench.py does with a long nack (read its log back, sort the records onto
the tree, cut knowledge messages and encode them for the wire), without sockets. CPU time
(process_time) per event, so a loaded machine changes little.

  python bench/nack_answer_micro.py [--events 200000] [--batch 100] [--rounds 3] [--span 0|1] [--channels 1]

The log holds `--events` events of 100-byte payloads, appended `--batch` at a time (a publisher's
PUBLISH: one batch record each), in a fresh directory under /tmp; the events of a batch take
`--channels` channels in turn, each on a tree of its own (1: every event on the one tree). One nack
of the first tree asks for all of them; each ReadLog is served by the log at once (as the log's
own bytes, storage/log.py `read_span`, when the ReadLog asks for a span and `--span 1`) and its
knowledge messages are packed as the peer link would. Printed: CPU per event retransmitted for the
reads and the answer (the machine), and for packing the messages.
"""

from __future__ import annotations

import argparse
import inspect
import pathlib
import tempfile
import time

import msgpack

from tidings.aio.storage_worker import log_state
from tidings.core.effects import ReadLog
from tidings.core.reliability.nack_answers import NackAnswers, ReadLimits
from tidings.core.reliability.source_knowledge import EventTails, KnowledgeWriter, PublishOnTree
from tidings.storage import EventLog

PUBEND = "p00000000000000ab"
FIRST_TICK = 1_700_000_000_000_000


def channel(k: int) -> str:
    return f"bench/{k}"


def fill(log: EventLog, events: int, batch: int, channels: int) -> None:
    pack = msgpack.Packer().pack
    tick = FIRST_TICK
    for start in range(0, events, batch):
        n = min(batch, events - start)
        log.append([(tick + k, pack([PUBEND, tick + k, channel(k % channels), {}, "s", "i", b"x" * 100]))
                    for k in range(n)])
        tick += n
    log.sync()


def answer(log: EventLog, events: int, span: bool) -> tuple[int, int, float]:
    """One nack of tree 0 answered: events sent, bytes packed, and the CPU seconds packing took."""
    writer = KnowledgeWriter(PUBEND, "127.0.0.1:1", 1 << 20, lambda name: [name + "/#"])
    tree = channel(0) + "/#"
    tails = EventTails(1000)
    tails.recover(FIRST_TICK + events)
    answers = NackAnswers(ReadLimits(1 << 20, 4, 1 << 40, 10**9), writer, tails, lambda _: False)
    state = log_state(log)
    pack = msgpack.Packer().pack
    takes_span = "span" in inspect.signature(answers.log_read).parameters
    effects: list[object] = list(answers.nacked(0, tree, [(0, FIRST_TICK + events)], state.last_tick or 0, state,
                                                None))
    sent = wire_bytes = 0
    packing = 0.0
    while effects:
        eff = effects.pop()
        if isinstance(eff, PublishOnTree):
            started = time.process_time()
            wire_bytes += len(pack([eff.origin, eff.message.to_wire()]))
            packing += time.process_time() - started
            sent += len(eff.message.ticks)
            continue
        assert isinstance(eff, ReadLog)
        found = log.read_span(eff.after, eff.max_bytes, eff.through) if span and eff.span else None
        records = log.read(eff.after, eff.max_bytes, eff.through) if found is None else []
        more = (answers.log_read(0, eff.reader, records, state, found) if takes_span
                else answers.log_read(0, eff.reader, records, state))
        effects += reversed(more)
    return sent, wire_bytes, packing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--span", type=int, default=1)
    parser.add_argument("--channels", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nack-micro-") as directory:
        log = EventLog.open(pathlib.Path(directory))
        fill(log, args.events, args.batch, args.channels)
        for _ in range(args.rounds):
            started = time.process_time()
            sent, wire_bytes, packing = answer(log, args.events, bool(args.span))
            cpu = time.process_time() - started - packing
            assert sent == sum(1 for k in range(args.events) if k % args.batch % args.channels == 0), sent
            print(f"{sent} events retransmitted, {wire_bytes} bytes on the wire; CPU per event: "
                  f"{cpu / sent * 1e6:.2f} us reading and answering, {packing / sent * 1e6:.2f} us packing")
        log.close()


if __name__ == "__main__":
    main()
