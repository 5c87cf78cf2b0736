"""When a gap is nacked. A gap in live knowledge waits GCT (`gap_curiosity_ns`): its ticks may
still be on their way. Ticks the stream had been past and needs again (a subscription resumed
behind the stream's floor, a child's nack for ticks the cache let go) are not on their way, and
their gap is nacked at once: a durable subscriber away for 67 ms in the Figure 4 simulation got
its first missed events 200 ms after it came back before this, 3.6 ms after it now.
"""

from __future__ import annotations

from typing import Any

from tests.unit.test_nack_repeat import gapped
from tests.unit.test_reliability_filtering import PUBEND, TREE, knowledge, node, peer_messages
from tidings.core.config import BrokerConfig
from tidings.core.reliability import messages
from tidings.core.wire.types import ReliabilityType

MS = 1_000_000
GCT = BrokerConfig().gap_curiosity_ns


def nacks(effects: list[Any]) -> list[messages.Nack]:
    return peer_messages(effects, ReliabilityType.NACK, messages.Nack)


def first_nack(gd: Any, effects: list[Any], end: int) -> tuple[int, messages.Nack] | None:
    """When (ns) and what `gd` nacks first: in `effects` (at once), else at its timers, up to `end`."""
    now_sent = nacks(effects)
    if now_sent:
        return -1, now_sent[0]
    for _ in range(1_000):
        deadline = gd.next_deadline()
        if deadline is None or deadline > end:
            return None
        sent = nacks(gd.handle_timeout(deadline))
        if sent:
            return deadline, sent[0]
    return None


def past_stream(children: list[str], config: BrokerConfig | None = None) -> Any:
    """A broker whose stream of PUBEND went past tick 1000 with one subscriber that has it all:
    its floor is 1000, nothing before it is kept."""
    gd, _ = node("f", "parent", children, config=config)
    gd.local_subscribe(0, 1, TREE, 0)
    for child in children:
        gd.child_added(0, TREE, child, [0, []])
    gd.event_arrived(1 * MS, TREE, knowledge(0, 1000, {}, None), "parent")
    for child in children:  # each child has it all too
        gd.received(2 * MS, child, messages.StreamAcks((messages.StreamAck(TREE, PUBEND, 1000, 1000, 1000),)).to_wire())
    return gd


def test_a_gap_in_live_knowledge_waits_gct() -> None:
    got = first_nack(gapped(), [], 10_000 * MS)
    assert got is not None and got[0] == GCT
    assert (got[1].ranges[0][0], got[1].ranges[-1][1]) == (100, 150)


def test_a_subscription_resumed_behind_the_floor_nacks_what_it_lacks_at_once() -> None:
    gd = past_stream([])
    assert gd.trees[TREE].istreams[PUBEND].floor == 1000
    out = gd.local_subscribe(5 * MS, 2, TREE, 1000, positions={PUBEND: 400})  # a checkpoint at 400
    got = first_nack(gd, out, 10_000 * MS)
    assert got is not None and got[0] <= 5 * MS  # not 5 ms + GCT
    assert (got[1].ranges[0][0], got[1].ranges[-1][1]) == (400, 1000)
    # ... and only once: the nack is not repeated before NRT
    assert first_nack(gd, [], 5 * MS + BrokerConfig().nack_repeat_ns_min - 1) is None


def test_a_childs_nack_for_ticks_the_forwarder_let_go_goes_upstream_at_once() -> None:
    """A child that lost what it had (a restarted broker) nacks ticks its parent no longer keeps:
    the parent asks its own parent at once, not one GCT later at every hop."""
    gd = past_stream(["c"])
    assert gd.trees[TREE].istreams[PUBEND].floor == 1000
    out = gd.received(5 * MS, "c", messages.Nack(TREE, PUBEND, ((600, 1000),)).to_wire())
    got = first_nack(gd, out, 10_000 * MS)
    assert got is not None and got[0] <= 5 * MS
    assert (got[1].ranges[0][0], got[1].ranges[-1][1]) == (600, 1000)
