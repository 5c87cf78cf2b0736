"""Route advice: the broker's candidates and the client's rule for moving."""

from tidings.core.broker.advice import Candidate, Probe, Reason, RouteAdvice, candidates, choose, decode, host_of
from tidings.core.config import BrokerConfig
from tidings.core.effects import Send
from tidings.core.wire import decoders, messages

MS = 1_000_000


def probe(address, rtt_ms, overloaded=False, draining=False):
    return Probe(f"{address}:1", int(rtt_ms * MS), overloaded, draining)


def choose_at(reason, rtt_ns, probes, current="here:1"):
    got = choose(reason, rtt_ns, probes, current)
    return None if got is None else host_of(got)


def test_candidates_are_the_nearest_neighbours_without_the_broker_itself():
    near = [(f"b{i}:1", i * MS) for i in range(12)]
    got = candidates(near, "b0:1")
    assert [c.address for c in got] == [f"b{i}:1" for i in range(1, 9)]


def test_closer_is_followed_only_when_clearly_closer():
    assert choose_at(Reason.CLOSER, 10 * MS, [probe("a", 6), probe("b", 7)]) is None  # not half
    assert choose_at(Reason.CLOSER, 10 * MS, [probe("a", 4), probe("b", 3)]) == "b"
    assert choose_at(Reason.CLOSER, 3 * MS, [probe("a", 1.2)]) is None  # half, but under 2 ms less: noise
    assert choose_at(Reason.CLOSER, 10 * MS, [probe("a", 1, overloaded=True)]) is None


def test_closer_never_moves_to_a_broker_on_the_same_host():
    """Two brokers of one machine are equally far from any client: what a probe measures between
    them is the host's load (a busy host's current broker answered in 10 ms, its neighbour in 1 ms,
    and a publisher moved away from the broker it was placed on)."""
    same = [Probe("127.0.0.1:7401", 1 * MS, False, False), Probe("127.0.0.1:7402", 2 * MS, False, False)]
    assert choose(Reason.CLOSER, 10 * MS, same, "127.0.0.1:7400") is None
    assert choose(Reason.CLOSER, 10 * MS, [*same, Probe("10.0.0.2:7400", 3 * MS, False, False)],
                  "127.0.0.1:7400") == "10.0.0.2:7400"
    assert choose(Reason.DRAINING, 10 * MS, same, "127.0.0.1:7400") == "127.0.0.1:7401"  # drains still move
    assert host_of("[::1]:7400") == "::1" and host_of("b.example:7400") == "b.example"


def test_overloaded_and_draining_move_to_any_healthy_candidate():
    probes = [probe("far", 50), probe("near", 5, draining=True), probe("mid", 20)]
    assert choose_at(Reason.OVERLOADED, 1 * MS, probes) == "mid"
    assert choose_at(Reason.DRAINING, 1 * MS, probes) == "mid"
    assert choose_at(Reason.DRAINING, 1 * MS, [probe("x", 1, overloaded=True)]) is None
    assert choose_at(Reason.DRAINING, 1 * MS, []) is None


def test_advice_the_client_cannot_read_is_ignored():
    assert decode("closer", [["b:1", 250], "junk", ["b:2"], [3, 4]]) == (Reason.CLOSER, [Candidate("b:1", 250_000)])
    assert decode("elsewhere", []) is None and decode("closer", {}) is None


def test_the_broker_advises_its_nearest_neighbours_and_says_why():
    advice = RouteAdvice("p", BrokerConfig(clients_advised_above=2))
    near = [("b1:1", 3 * MS), ("b2:1", 5 * MS)]
    assert advice.advise([7], 1, "me:1", None) == []  # not in an overlay (yet): nothing to advise
    assert advice.advise([7], 1, "me:1", ([], ["b1:1"])) == []  # nobody timed, not draining
    (sent,) = advice.advise([7], 1, "me:1", (near, ["b1:1", "b3:1"]))
    assert isinstance(sent, Send) and sent.conn == 7
    got = decoders.decode_broker_message(sent.data[4:])
    assert isinstance(got, messages.Advice)
    assert (got.reason, got.entries) == ("closer", [["b1:1", 3000], ["b2:1", 5000]])
    assert advice.reason(3) is Reason.OVERLOADED and advice.welcome_info(3)["overloaded"]
    advice.drain()
    (sent,) = advice.advise([7], 1, "me:1", (near, ["b1:1", "b3:1"]))  # every broker it knows, untimed last
    got = decoders.decode_broker_message(sent.data[4:])
    assert got.reason == "draining" and [e[0] for e in got.entries] == ["b1:1", "b2:1", "b3:1"]
    assert advice.welcome_info(0) | {"clients": 0} == {**advice.features, "clients": 0, "draining": True,
                                                       "overloaded": False}
