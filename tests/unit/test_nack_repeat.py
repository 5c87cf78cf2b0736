"""How often an unanswered nack is repeated (NRT): backing off only while upstream is silent;
and how a long answer is paced (acks that report a catchup's progress, congested links).

A parent that keeps sending knowledge of a stream while a nack of it goes unanswered is alive: the
nack or its answer was lost, and the nack is repeated at the round-trip estimate. A parent that
sends nothing may be down (or the pubend above it): the repeats back off, doubling up to the cap.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from tests.unit.test_reliability_filtering import PUBEND, TREE, knowledge, node, record, sent_to
from tidings.core.config import BrokerConfig
from tidings.core.overlay.envelope import PeerSend
from tidings.core.reliability import messages
from tidings.core.reliability.effects import RememberPublisher
from tidings.core.wire.types import ReliabilityType

MS = 1_000_000


def nacks_until(gd: Any, end: int, alive_every: int | None, asked: list[Any] | None = None) -> list[int]:
    """Drive `gd`'s timers until `end` (ns); when `alive_every` is set, the parent sends the
    stream's next 100 ticks (no data, so the gap stays open) that often. Returns when NACKs left;
    what it asked of Scribe meanwhile goes to `asked`."""
    sent: list[int] = []
    through = 200
    next_alive = alive_every
    for _ in range(10_000):
        deadline = gd.next_deadline()
        if deadline is None or deadline > end:
            break
        if next_alive is not None and next_alive <= deadline:
            gd.event_arrived(next_alive, TREE, knowledge(through, through + 100, {}, None), "parent")
            through += 100
            next_alive += alive_every  # type: ignore[operator]
            continue
        out = gd.handle_timeout(deadline)
        sent += [deadline for e in out if type(e) is PeerSend and e.message[0] == ReliabilityType.NACK]
        if asked is not None:
            asked += [e for e in out if type(e) is RememberPublisher]
    return sent


def gapped() -> Any:
    gd, _ = node("f", "parent", [])
    gd.local_subscribe(0, 1, TREE, 0)
    # ticks 1..100 known, 101..150 never arrived (lost), 151..200 known: a gap of (100, 150]
    gd.event_arrived(0, TREE, knowledge(0, 100, {50: record(50, "nodes/a")}, None), "parent")
    gd.event_arrived(0, TREE, knowledge(150, 200, {}, None), "parent")
    return gd


def test_an_unanswered_nack_to_a_silent_parent_backs_off_to_the_cap() -> None:
    config = BrokerConfig()
    sent = nacks_until(gapped(), 30_000 * MS, None)
    gaps = [b - a for a, b in pairwise(sent)]
    assert len(gaps) >= 4
    assert gaps[0] <= config.nack_repeat_ns_min * 2
    assert all(b >= a for a, b in pairwise(gaps))  # never shorter while nothing is heard
    assert gaps[-1] == config.nack_repeat_ns_max


def test_a_nack_to_a_parent_that_is_still_talking_is_repeated_without_backing_off() -> None:
    config = BrokerConfig()
    sent = nacks_until(gapped(), 10_000 * MS, alive_every=50 * MS)
    gaps = [b - a for a, b in pairwise(sent)]
    assert len(gaps) >= 10  # about one per NRT: 10 s at 300 ms, not 5 repeats backed off to 5 s
    assert max(gaps) <= 2 * config.nack_repeat_ns_min


def test_a_tree_scribe_pruned_here_is_dropped_and_its_gaps_no_longer_nacked() -> None:
    """Scribe pruned the tree here (its only child left): no knowledge comes any more to show the
    reliability node, so the gap timer itself finds the tree gone and drops its streams."""
    gd, scribe = node("f", "parent", ["c"])
    gd.child_added(0, TREE, "c", [0, []])
    gd.event_arrived(0, TREE, knowledge(0, 100, {}, None), "parent")
    gd.event_arrived(0, TREE, knowledge(150, 200, {}, None), "parent")
    assert nacks_until(gd, 1_000 * MS, None)  # the child's gap (100, 150] is nacked
    scribe.kids = []
    scribe.on_tree = False
    asked: list[Any] = []
    assert nacks_until(gd, 60_000 * MS, None, asked) == []
    assert TREE not in gd.trees
    assert asked == [RememberPublisher(TREE, "origin")]  # told TREE_ACTIVE when it has members again


def test_an_answer_that_comes_after_repeated_nacks_does_not_stretch_nrt() -> None:
    """Karn's rule. A pubend down for 3 s answers at last: the time since its last (repeated) nack
    measures the outage, not a round trip. Taken as a sample it held NRT near its 2 s cap for many
    rounds (a lossy stream then recovered one 2 s round at a time: sim seeds 506, 522, 523, 554
    and 585 of the durable-return sweep). The next gap's unanswered nack is repeated after NRT's
    floor again."""
    config = BrokerConfig()
    gd = gapped()
    assert len(nacks_until(gd, 3_000 * MS, None)) >= 3  # repeated, backing off: the parent is silent
    gd.event_arrived(3_000 * MS, TREE, knowledge(100, 150, {}, None), "parent")  # answered at last
    gd.event_arrived(3_100 * MS, TREE, knowledge(300, 400, {}, None), "parent")  # a new gap: (200, 300]
    first, second, *_ = nacks_until(gd, 10_000 * MS, None)
    assert first == 3_100 * MS + config.gap_curiosity_ns
    assert second - first == config.nack_repeat_ns_min


def test_a_nack_is_not_repeated_while_its_answer_is_arriving() -> None:
    """A long absence is answered over seconds (one knowledge message per log read). While the
    answers keep moving the doubt horizon the nack is being answered: repeating it would have the
    pubend read and send the same ticks again. Once they stop short of the gap's end (a message
    was lost), it is repeated after NRT: the answers' arrival times, seconds after the nack, are
    not round-trip samples that would stretch NRT towards its cap."""
    config = BrokerConfig()
    gd, _ = node("f", "parent", [])
    gd.local_subscribe(0, 1, TREE, 0)
    gd.event_arrived(0, TREE, knowledge(0, 100, {}, None), "parent")
    gd.event_arrived(0, TREE, knowledge(20_000, 20_100, {}, None), "parent")  # a gap of (100, 20_000]
    sent: list[int] = []
    horizon = 100
    now = 0
    for step in range(1, 161):  # answers of 200 ticks every 50 ms for 3 s, then nothing more for 5 s
        now = step * 50 * MS
        if step <= 60:
            gd.event_arrived(now, TREE, knowledge(horizon, horizon + 200, {horizon + 1: record(horizon + 1, "nodes/a")},
                                                  None), "parent")
            horizon += 200
        deadline = gd.next_deadline()
        while deadline is not None and deadline <= now:
            out = gd.handle_timeout(deadline)
            sent += [deadline for e in out if type(e) is PeerSend and e.message[0] == ReliabilityType.NACK]
            deadline = gd.next_deadline()
    answering = [t for t in sent if t <= 3000 * MS]
    assert len(answering) == 1  # the first nack only, for the whole gap
    assert [t for t in sent if t > 3000 * MS]  # repeated once the answers stopped
    assert min(t for t in sent if t > 3000 * MS) <= 3000 * MS + 2 * config.nack_repeat_ns_min


def acks_to(effects: list[Any], upstream: str) -> list[int]:
    return [stream.through for e in effects if type(e) is PeerSend and e.address == upstream
            and e.message[0] == ReliabilityType.ACK for stream in messages.decode(e.message).streams]


def test_a_catchup_below_what_was_acknowledged_acknowledges_its_progress_from_there() -> None:
    """The pubend paces its answer to a catchup's nack by the acks (source.py): a stream whose ack
    point a catchup took back below its earlier acks must report the catchup's progress, or the
    pubend would hear nothing of it until the catchup passed the old ack."""
    gd, _ = node("f", "parent", [])
    gd.local_subscribe(0, 1, TREE, 0)
    out = gd.event_arrived(0, TREE, knowledge(0, 1000, {500: record(500, "nodes/a")}, None), "parent")
    assert acks_to(out, "parent") == [1000]
    gd.local_subscribe(1, 2, TREE, 100)  # a catchup from tick 100: (100, 1000] is fetched again
    progress = []
    for n, through in enumerate(range(300, 1001, 200)):
        out = gd.event_arrived(10 + n, TREE, knowledge(through - 200, through, {through: record(through, "nodes/a")},
                                                       None), "parent")
        progress += acks_to(out, "parent")
    assert progress == [300, 500, 700, 900]



def test_knowledge_that_moves_nothing_is_acknowledged_again_at_the_point_last_sent_never_above() -> None:
    """A message that moves nothing (ticks past a gap, or ticks had already) has the stream send its
    ack again, in case the last one was lost: the point it last sent, never a higher one from before a
    catchup took the stream back. That one would tell the parent the stream has the ticks it is
    fetching again, and the parent would let their records go, so each answer lost on the way cost a
    fetch from further up. Seed 203 of the client failover soak with complete nacks: the forwarder
    dropped the ticks it had just fetched for its child, lost on the way, and fetched them from the
    pubend's log again, answer after answer; 5 events were late past the soak's 8 s of quiet."""
    gd, _ = node("f", "parent", [])
    gd.local_subscribe(0, 1, TREE, 0)
    out = gd.event_arrived(0, TREE, knowledge(0, 1000, {500: record(500, "nodes/a")}, None), "parent")
    assert acks_to(out, "parent") == [1000]
    gd.local_subscribe(1, 2, TREE, 100)  # a catchup from tick 100: (100, 1000] is fetched again
    out = gd.event_arrived(2, TREE, knowledge(600, 800, {700: record(700, "nodes/a")}, None), "parent")
    assert gd.trees[TREE].istreams[PUBEND].horizon == 100  # (100, 600] is still a gap
    assert acks_to(out, "parent") == [100]  # again, in case it was lost: not 1000


def test_a_child_whose_link_is_congested_is_sent_nothing_until_it_drains() -> None:
    """A peer link's queue is bounded (past it messages are dropped): a retransmission pushed into
    a congested link would be dropped and nacked again, so the child waits, and gets it all once
    the link drains."""
    congested = {"c"}
    gd, _ = node("f", "parent", ["c"], congested.__contains__)
    gd.child_added(0, TREE, "c", [0, []])
    out = gd.event_arrived(0, TREE, knowledge(0, 100, {50: record(50, "nodes/a")}, None), "parent")
    assert sent_to(out, "c") == []
    assert gd.link_drained(1, "c") == []  # (a spurious drain: still congested, nothing sent)
    congested.clear()
    out = gd.link_drained(2, "c")
    assert [(k.after, k.through, k.ticks) for k in sent_to(out, "c")] == [(0, 100, (50,))]
