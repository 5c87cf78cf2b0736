"""The persistent filtering subsystem's side of a subscriber's broker (reliability/constream.py) and
the sparse catchup it allows (Istream.sparsen): only the ticks that matched a resumed durable
subscription are asked for again; nobody else is misled by the silence it implies."""

from __future__ import annotations

import msgpack

from tidings.core.durable.checkpoint import Checkpoint
from tidings.core.durable.constream import Catchup, Constream, Recorded
from tidings.core.durable.registrations import Registration
from tidings.core.effects import PfsAppend, PfsChop, ReadPfs
from tidings.core.filters import parse_filter
from tidings.core.inputs import PfsAnswered
from tidings.core.reliability import istream
from tidings.core.reliability.istream import Istream, StreamLimits
from tidings.core.reliability.ticks import Knowledge

TREE = "nodes/#"
PUBEND = "p-far"
LIMITS = StreamLimits(cache_bytes_max=1 << 20, nack_ranges_max=8, nack_range_ticks_max=1000, piece_bytes_max=1 << 20,
                      nack_merge_ticks=5)


def record(tick: int, channel: str, load: float, pubend: str = PUBEND) -> bytes:
    return msgpack.packb([pubend, tick, channel, {"load": load}, "svc", "i1", b""])


def test_records_list_the_registrations_each_tick_matched_and_nothing_for_the_rest():
    c = Constream()
    c.add(TREE, 1, "nodes/+/load", parse_filter("load > 2"))
    c.add(TREE, 2, "nodes/h1/#", None)
    ticks = [11, 12, 13, 14]
    records = [record(11, "nodes/h1/load", 5.0), record(12, "nodes/h2/load", 1.0), record(13, "nodes/h2/mem", 9.0),
               record(14, "nodes/h1/load", 0.5, pubend="p-other")]  # not this stream's pubend: nobody's
    out = c.recorded(Recorded(TREE, PUBEND, 10, 20, ticks, records, lost=False))
    assert out == [PfsAppend(Constream.stream(TREE, PUBEND), [(11, [1, 2])], 20)]
    assert c.recorded(Recorded(TREE, PUBEND, 10, 20, ticks, records, lost=False)) == []  # recorded already
    assert c.recorded(Recorded("other/#", PUBEND, 0, 5, [], [], lost=False)) == []  # no registrations there


def test_a_catchup_reads_the_pfs_only_inside_its_registrations_coverage():
    c = Constream()
    c.add(TREE, 1, "nodes/#", None)
    c.recorded(Recorded(TREE, PUBEND, 100, 200, [], [], lost=False))  # the stream reaches this broker at 100
    c.add(TREE, 2, "nodes/#", None)  # recorded from 200 on
    assert c.catchup(7, 1, Checkpoint(0, {PUBEND: 99}), "nodes/#", "") == []  # before the PFS consumer started
    assert c.catchup(7, 1, Checkpoint(0, {PUBEND: 200}), "nodes/#", "") == []  # nothing after the token recorded yet
    span = Catchup(7, TREE, PUBEND, 150, 200, ())  # its nacks wait up to 200 for the answer
    reads = c.catchup(7, 1, Checkpoint(0, {PUBEND: 150}), "nodes/#", "")
    assert reads == [(ReadPfs(1, Constream.stream(TREE, PUBEND), 1, 150, c.read_ticks_max), span)]
    assert c.catchup(8, 2, Checkpoint(150, {}), "nodes/#", "") == []  # registration 2 is known only after 200
    assert c.answered(PfsAnswered(0, 1, (160, 170), 200, 0)) == (span, Catchup(7, TREE, PUBEND, 150, 200, (160, 170)))
    assert c.answered(PfsAnswered(0, 1, (), 200, 0)) is None  # answered once


def test_a_failed_read_or_a_chopped_range_leaves_the_catchup_to_refilter():
    c = Constream()
    c.add(TREE, 1, "nodes/#", None)
    c.recorded(Recorded(TREE, PUBEND, 100, 300, [], [], lost=False))
    c.catchup(7, 1, Checkpoint(0, {PUBEND: 150}), "nodes/#", "")
    span = Catchup(7, TREE, PUBEND, 150, 300, ())
    assert c.answered(PfsAnswered(0, 1, (), -1, 0)) == (span, None)
    c.catchup(7, 1, Checkpoint(0, {PUBEND: 150}), "nodes/#", "")
    # chopped through 250: nothing can be said of (150, 250]
    assert c.answered(PfsAnswered(0, 2, (260,), 300, 250)) == (span, Catchup(7, TREE, PUBEND, 250, 300, (260,)))


def test_a_hole_or_a_lost_range_restarts_coverage_after_it():
    c = Constream()
    c.add(TREE, 1, "nodes/#", None)
    c.recorded(Recorded(TREE, PUBEND, 100, 200, [], [], lost=False))
    c.recorded(Recorded(TREE, PUBEND, 250, 300, [], [], lost=False))  # (200, 250] never seen
    assert c.catchup(7, 1, Checkpoint(0, {PUBEND: 220}), "nodes/#", "") == []
    assert len(c.catchup(7, 1, Checkpoint(0, {PUBEND: 250}), "nodes/#", "")) == 1
    c.recorded(Recorded(TREE, PUBEND, 300, 400, [], [], lost=True))  # released before it got here
    c.recorded(Recorded(TREE, PUBEND, 400, 500, [], [], lost=False))
    assert c.catchup(7, 1, Checkpoint(0, {PUBEND: 350}), "nodes/#", "") == []
    assert len(c.catchup(7, 1, Checkpoint(0, {PUBEND: 400}), "nodes/#", "")) == 1


def test_chops_follow_the_smallest_release_and_the_last_registration_takes_its_streams():
    c = Constream()
    c.add(TREE, 1, "nodes/#", None)
    c.add(TREE, 2, "nodes/#", None)
    c.recorded(Recorded(TREE, PUBEND, 0, 500, [], [], lost=False))
    released = {n: Registration(n, TREE, Checkpoint(0, {PUBEND: at}), None) for n, at in ((1, 300), (2, 200))}
    stream = Constream.stream(TREE, PUBEND)
    assert c.chop(released.get) == [PfsChop(stream, 200)]
    assert c.chop(released.get) == []  # no further
    assert c.remove(2) == []
    assert c.chop(released.get) == [PfsChop(stream, 300)]
    assert c.remove(1) == [PfsChop(stream, None)]
    assert not c.recording(TREE)


def test_a_matching_filter_is_required_to_use_the_recording():
    c = Constream()
    c.add(TREE, 1, "nodes/+/load", parse_filter("load > 2"))
    c.recorded(Recorded(TREE, PUBEND, 100, 200, [], [], lost=False))
    token = Checkpoint(0, {PUBEND: 150})
    assert len(c.catchup(7, 1, token, "nodes/+/load", "load > 2")) == 1
    assert c.catchup(7, 1, token, "nodes/+/load", "") == []
    assert c.catchup(7, 1, token, "nodes/#", "load > 2") == []
    assert c.catchup(7, 2, token, "nodes/+/load", "load > 2") == []


# ---- what the reliability node is told ---------------------------------------------------------------


class FakeNode:
    """The reliability node's side of the PFS (node.py), as a list of the calls it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def record(self, now, tree, registration, pattern, filter_text):
        self.calls.append(("record", registration))
        return [f"recorded {registration}"]

    def unrecord(self, now, tree, registration):
        self.calls.append(("unrecord", registration))
        return [f"unrecorded {registration}"]

    def await_pfs(self, now, span):
        self.calls.append(("await", span.key))

    def pfs_answered(self, now, span, answer):
        self.calls.append(("answered", span.key))
        return 3, ["nacks"]


def reg(number: int, flt: str = "") -> Registration:
    return Registration(number, TREE, Checkpoint(0, {}), None, pattern="nodes/#", filter=flt)


def test_registrations_are_recorded_only_in_an_overlay_with_durable_pfs_and_a_filter_that_parses():
    carried: list[list] = []
    outside = Constream()
    outside.registered(0, [reg(1)], [reg(2)], carried.append)  # not in an overlay: nobody to tell
    assert carried == [] and not outside.recording(TREE)
    off, node = Constream(), FakeNode()
    off.start(0, node, False, [reg(1)], carried.append)  # durable_pfs off: never recorded, still unrecorded
    off.registered(0, [reg(2)], [reg(2)], carried.append)
    assert node.calls == [("unrecord", 2)] and not off.recording(TREE)
    c, node, carried = Constream(), FakeNode(), []
    c.start(0, node, True, [reg(1), reg(2, "load >")], carried.append)  # 2's saved filter no longer parses
    c.registered(0, [reg(3, "load > 2")], [reg(1)], carried.append)
    c.recorded(Recorded(TREE, PUBEND, 100, 200, [], [], lost=False))
    assert node.calls == [("record", 1), ("record", 3), ("unrecord", 1)]
    assert carried == [["recorded 1"], ["recorded 3"], ["unrecorded 1"]]  # one call's effects at a time
    assert c.resume(0, 7, None, Checkpoint(0, {PUBEND: 150}), "nodes/#", None) == []  # a new registration
    reads = c.resume(0, 7, reg(3), Checkpoint(0, {PUBEND: 150}), "nodes/#", parse_filter("load > 2"))
    assert [r.registration for r in reads] == [3] and node.calls[-1] == ("await", 7)
    assert c.pfs_answered(PfsAnswered(0, reads[0].reader, (160,), 200, 0)) == ["nacks"]
    assert c.ticks_silenced == 3 and c.pfs_answered(PfsAnswered(0, reads[0].reader, (), 200, 0)) == []


# ---- the sparse catchup in the input stream ----------------------------------------------------------


def caught_up_stream() -> Istream:
    """A stream known through 100 whose consumers (a child, the PFS consumer) are all past it."""
    ist = Istream(TREE, PUBEND, 0, LIMITS)
    ist.attach("child", 0)
    ist.attach(-1, 0)
    ist.accumulate(0, 100, [], [])
    for key in ("child", -1):
        ist.pieces_for(ist.consumers[key])
    ist.acked("child", 100, 0, 0)
    ist.bound_memory()
    assert ist.floor == 100
    return ist


def test_a_resumed_subscription_asks_only_for_the_ticks_that_matched_it():
    ist = caught_up_stream()
    ist.attach(7, 20)  # resumes from its token: 21..100 unknown again
    assert ist.gaps() == [(20, 100)]
    assert ist.sparsen(7, 20, 100, (40, 42, 90)) == 80 - 4
    assert ist.gaps() == [(39, 42), (89, 90)]  # 40 and 42 are closer than 5 ticks: one range
    assert ist.horizon == 39
    ist.accumulate(39, 42, [40, 41, 42], [b"a", b"b", b"c"])  # 41 is fetched with them (filtered on arrival)
    ist.accumulate(80, 90, [85, 90], [b"x", b"d"])  # 85 was F here: kept, never handed on
    pieces = ist.pieces_for(ist.consumers[7])
    assert [t for p in pieces for t in p.ticks] == [40, 41, 42, 90] and ist.consumers[7].sent_through == 100


def test_a_catchup_leaves_at_most_so_many_ranges_unknown_and_the_rest_as_it_was(monkeypatch):
    wanted = tuple(range(2, 100, 7))  # 2, 9, ..., 93: 14 ranges, none merged
    ist = caught_up_stream()
    ist.attach(7, 0)
    assert ist.sparsen(7, 0, 100, wanted) == 100 - 14
    assert ist.knowledge(93) is Knowledge.Q and ist.knowledge(94) is Knowledge.F
    assert len(ist.gaps()) == LIMITS.nack_ranges_max  # (a nack's worth at a time)
    monkeypatch.setattr(istream, "SPARSE_RANGES_MAX", 3)
    ist = caught_up_stream()
    ist.attach(7, 0)
    assert ist.sparsen(7, 0, 100, wanted) == 22 - 3  # up to the 4th wanted tick (23); from it, as it was
    assert ist.knowledge(22) is Knowledge.F and ist.knowledge(23) is Knowledge.Q


def test_a_catchup_waiting_for_the_pfs_nacks_nothing_of_its_span_until_answered_or_too_late():
    ist = caught_up_stream()
    ist.attach(7, 20)
    ist.waiting[7] = (100, 5_000)
    ist.accumulate(150, 160, [], [])  # a new gap above the span: nacked as usual
    assert ist.gaps() == [(100, 150)]
    ist.lapse_waits(4_999)
    assert ist.gaps() == [(100, 150)]
    ist.lapse_waits(5_000)
    assert ist.gaps() == [(20, 150)]
    ist.waiting[7] = (100, 9_000)
    ist.detach(7)
    assert not ist.waiting


def test_the_silence_a_catchup_implies_misleads_nobody_else():
    ist = caught_up_stream()
    ist.attach(7, 20)
    ist.attach(8, 60)  # another subscription from 60: below it, 7's silence is not the stream's
    assert ist.sparsen(7, 20, 100, (40,)) == 40 - 1
    assert ist.gaps()[0] == (39, 40) and ist.knowledge(70) is Knowledge.Q
    ist.rewind("child", 30)  # a child that asks again for what followed 30 doubts 7's silence there
    assert ist.knowledge(50) is Knowledge.Q and ist.knowledge(25) is Knowledge.F
