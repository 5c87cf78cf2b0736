"""Route advice: the broker's candidates and the client's rule for moving."""

from tidings.core.advice import Candidate, Probe, Reason, candidates, choose, decode

MS = 1_000_000


def probe(address, rtt_ms, overloaded=False, draining=False):
    return Probe(address, int(rtt_ms * MS), overloaded, draining)


def test_candidates_are_the_nearest_neighbours_without_the_broker_itself():
    near = [(f"b{i}:1", i * MS) for i in range(12)]
    got = candidates(near, "b0:1")
    assert [c.address for c in got] == [f"b{i}:1" for i in range(1, 9)]


def test_closer_is_followed_only_when_clearly_closer():
    assert choose(Reason.CLOSER, 10 * MS, [probe("a", 6), probe("b", 7)]) is None  # not half
    assert choose(Reason.CLOSER, 10 * MS, [probe("a", 4), probe("b", 3)]) == "b"
    assert choose(Reason.CLOSER, 3 * MS, [probe("a", 1.2)]) is None  # half, but under 2 ms less: noise
    assert choose(Reason.CLOSER, 10 * MS, [probe("a", 1, overloaded=True)]) is None


def test_overloaded_and_draining_move_to_any_healthy_candidate():
    probes = [probe("far", 50), probe("near", 5, draining=True), probe("mid", 20)]
    assert choose(Reason.OVERLOADED, 1 * MS, probes) == "mid"
    assert choose(Reason.DRAINING, 1 * MS, probes) == "mid"
    assert choose(Reason.DRAINING, 1 * MS, [probe("x", 1, overloaded=True)]) is None
    assert choose(Reason.DRAINING, 1 * MS, []) is None


def test_advice_the_client_cannot_read_is_ignored():
    assert decode("closer", [["b:1", 250], "junk", ["b:2"], [3, 4]]) == (Reason.CLOSER, [Candidate("b:1", 250_000)])
    assert decode("elsewhere", []) is None and decode("closer", {}) is None
