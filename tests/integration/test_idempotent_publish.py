"""Idempotent publish with a real broker process: duplicates answered with the original (pubend,
tick) before and after kill -9, each event logged once; bad producer ids and sequences refused."""

import json

import pytest

from tidings import EventError, sync
from tidings.core.wire import decoders, messages
from tidings.core.wire.frames import FrameDecoder
from tidings.testing import BrokerProcess

from .test_cli import tidings
from .wire_io import exchange

pytestmark = pytest.mark.integration

ROWS = 300


def rows(first: int, last: int) -> list[tuple[str, bytes, None, int]]:
    return [("sink/out", f"row {k}".encode(), None, k) for k in range(first, last)]


def test_duplicates_get_the_original_tick_across_kill_9(tmp_path):
    broker = BrokerProcess(tmp_path / "b").start()
    try:
        with sync.connect(broker.address, service="sink", instance="t0") as c:
            first = c.publish_many(rows(0, ROWS), producer="query-1/part-0")
            single = c.publish("sink/out", b"single", producer="query-1/part-1", seq=7)
            again = c.publish_many(rows(100, 150), producer="query-1/part-0")  # a retried task
            assert again == first[100:150] and all(r.duplicate for r in again)
            assert not any(r.duplicate for r in first)
        broker.kill()
        broker.start()
        with sync.connect(broker.address, service="sink", instance="t1") as c:
            replay = c.publish_many(rows(0, ROWS), producer="query-1/part-0")  # a replayed batch
            assert replay == first and all(r.duplicate for r in replay)
            assert c.publish("sink/out", b"single", producer="query-1/part-1", seq=7) == single
            fresh = c.publish("sink/out", b"new", producer="query-1/part-1", seq=8)
            assert not fresh.duplicate and fresh.tick > single.tick
            logged = [(e.tick, e.payload) for e in c.read("sink/#", after=0)]
        status = broker.status()
    finally:
        broker.stop()
    expected = [(r.tick, f"row {k}".encode()) for k, r in enumerate(first)]
    assert logged == [*expected, (single.tick, b"single"), (fresh.tick, b"new")]
    assert status["dedup_duplicates"] == ROWS + 1 and status["dedup_producers"] == 2


def test_bad_producer_ids_and_sequences_get_an_error_and_the_broker_serves_on(tmp_path):
    bad = [
        messages.publish(1, [["a/b", {}, b"x", 1]], "p" * 257),  # oversized producer id
        messages.publish(2, [["a/b", {}, b"x", -1]], "p"),  # negative sequence
        messages.publish(3, [["a/b", {}, b"x", "1"]], "p"),  # a sequence that is no integer
        messages.publish(4, [["a/b", {}, b"x", 1]], 42),  # a producer id that is no string
        messages.publish(5, [["a/b", {}, b"x"]], "p"),  # no sequence at all
    ]
    with BrokerProcess(tmp_path / "b") as broker:
        out = exchange(broker.address, messages.hello("fuzz", "1") + b"".join(bad))
        decoder = FrameDecoder(1 << 20)
        replies = [decoders.decode_broker_message(body) for body in decoder.feed(out)]
        errors = {e.context["seq"]: e.message for e in replies if isinstance(e, messages.Error)}
        assert sorted(errors) == [1, 2, 3, 4, 5]
        assert "producer id" in errors[1] and "producer sequence" in errors[2] and "pseq" in errors[5]
        assert [a.ticks for a in replies if isinstance(a, messages.Ack)] == [[None]] * 5
        with sync.connect(broker.address) as c:
            with pytest.raises(EventError, match="producer id"):
                c.publish("a/b", b"x", producer="p" * 257, seq=1)
            with pytest.raises(EventError, match="producer sequence"):
                c.publish("a/b", b"x", producer="p", seq=-1)
            assert not c.publish("a/b", b"x", producer="p", seq=1).duplicate  # still serving
            assert [e.payload for e in c.read("a/#", after=0)] == [b"x"]


def test_the_command_publishes_idempotently_and_a_read_from_start_shows_each_line_once(broker):
    b = ["--broker", broker.address]
    first = tidings("pub", *b, "jobs/done", "--producer", "runner-1", "--seq", "10", stdin="a\nb\n")
    again = tidings("pub", *b, "jobs/done", "--producer", "runner-1", "--seq", "10", stdin="a\nb\nc\n")
    assert first.returncode == again.returncode == 0, first.stderr + again.stderr
    acks = [json.loads(line) for line in (first.stdout + again.stdout).splitlines()]
    assert [a["tick"] for a in acks[2:4]] == [a["tick"] for a in acks[:2]]
    assert [a.get("duplicate", False) for a in acks] == [False, False, True, True, False]
    out = tidings("sub", *b, "jobs/#", "--from", "start", "--timeout", "1")  # all logged already: 1 s bounds the read
    assert [json.loads(line)["payload"] for line in out.stdout.splitlines()] == ["a", "b", "c"]
    bad = tidings("pub", *b, "jobs/done", "x", "--producer", "runner-1")
    assert bad.returncode == 2 and "--producer and --seq go together" in bad.stderr
