"""The auth cores without I/O: the challenge-response both ways, the guard's decisions and counts,
the token buckets, and the auth file's validation."""

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.core.auth.credentials import Credential, KdfParams, make_verifier
from tidings.core.auth.guard import Guard
from tidings.core.auth.handshake import ClientHandshake, Principal, ServerHandshake
from tidings.core.auth.limits import TokenBucket
from tidings.core.auth.policy import AuthFileError, AuthPolicy, Identity, Limits
from tidings.core.auth.rules import ANY_IDENTITY, PUBLISH, AccessRules, Rule
from tidings.core.errors import TidingsError
from tidings.core.units import SECOND_NS

KDF = KdfParams(n=1 << 8)
CRED = Credential("svc", b"s" * 32)
COUNTER = itertools.count()


def nonces(n):
    return next(COUNTER).to_bytes(n, "big")


NO_LIMITS = Limits()


def policy(anonymous=False, limits=NO_LIMITS, instances=("*",)):
    identity = Identity("svc", make_verifier(CRED.secret, b"salt" * 4, KDF), instances, limits)
    return AuthPolicy({"svc": identity}, AccessRules([]), None, anonymous, limits)


def handshake(pol, credential=CRED, instance="i1", client_nonce=b"c" * 24):
    client = ClientHandshake(credential, instance, client_nonce)
    server = ServerHandshake(pol, credential.name, instance, client_nonce, lambda: nonces(24))
    return client, server


def test_the_right_secret_authenticates_both_ways():
    client, server = handshake(policy())
    principal, signature = server.finish(client.answer(server.challenge))
    assert principal == Principal("svc", "i1", "svc", authenticated=True)
    client.check_welcome(signature)  # the broker proved it holds the verifier


def test_a_wrong_secret_fails_and_a_fake_broker_is_caught():
    client, server = handshake(policy(), Credential("svc", b"x" * 32))
    with pytest.raises(TidingsError, match="authentication failed"):
        server.finish(client.answer(server.challenge))
    client, _ = handshake(policy())
    impostor = ServerHandshake(policy(), "svc", "i1", b"c" * 24, lambda: b"n" * 24)
    client.answer(impostor.challenge)
    with pytest.raises(TidingsError, match="did not prove"):
        client.check_welcome(b"\x00" * 32)


def test_a_proof_for_one_challenge_fails_another():
    client, first = handshake(policy())
    proof = client.answer(first.challenge)
    _, second = handshake(policy())
    assert second.challenge.server_nonce != first.challenge.server_nonce
    with pytest.raises(TidingsError):
        second.finish(proof)


def test_a_credential_at_a_broker_without_identities_is_told_so():
    with pytest.raises(TidingsError, match="without --auth"):
        ServerHandshake(AuthPolicy.open(), "svc", "i", b"c" * 24, lambda: nonces(24))


def test_instances_and_anonymous_clients():
    with pytest.raises(TidingsError, match="may not use instance"):
        handshake(policy(instances=("web*",)), instance="db1")
    handshake(policy(instances=("web*",)), instance="web7")
    guard = Guard(policy(anonymous=False), nonces)
    with pytest.raises(TidingsError) as err:
        guard.hello("anyone", "i", None)
    assert err.value.code == "auth-required"
    guard = Guard(policy(anonymous=True), nonces)
    assert guard.hello("anyone", "i", None) == Principal("anyone", "i", "anonymous")
    with pytest.raises(TidingsError, match="reads as the registered identity 'svc'"):
        guard.hello("svc", "i", None)  # an anonymous client cannot take an identity's name


class Member:
    def __init__(self, conn):
        self.conn = conn
        self.subs = {}


def test_connection_and_subscription_limits_per_identity():
    guard = Guard(policy(limits=Limits(connections_max=2, subscriptions_max=3)), nonces)
    who = Principal("svc", "i", "svc")
    a, b = Member(1), Member(2)
    guard.admitted(who, a)
    guard.admitted(who, b)
    with pytest.raises(TidingsError, match="connections_max=2"):
        guard.admitted(who, Member(3))
    a.subs = {1: None, 2: None}
    b.subs = {1: None}
    assert guard.check_subscribe("svc", "x/#").code == "limit-exceeded"
    guard.left("svc", 2)
    assert guard.check_subscribe("svc", "x/#") is None
    guard.admitted(who, Member(4))
    assert guard.status()["auth"]["identities"]["svc"] == {"connections": 2, "refusals": 2}
    assert guard.take_notes() == []  # refusals are logged by their connection (core/broker/refusals.py)


def test_the_broker_s_own_connections_are_not_held_against_connections_max():
    """A shared subscription group's connection at its home (`own`, Guard.vouched) neither is
    refused by connections_max nor takes one of the identity's clients' places; its subscriptions
    still count against subscriptions_max."""
    guard = Guard(policy(limits=Limits(connections_max=1, subscriptions_max=2)), nonces)
    who = Principal("svc", "i", "svc")
    groups = [Member(-2), Member(-3)]
    for group in groups:
        guard.admitted(who, group, own=True)
        group.subs = {1: None}
    guard.admitted(who, Member(1))  # the identity's one client
    with pytest.raises(TidingsError, match="connections_max=1"):
        guard.admitted(who, Member(2))
    assert guard.check_subscribe("svc", "x/#").code == "limit-exceeded"  # two groups' subscriptions
    guard.left("svc", -2)
    guard.left("svc", 1)
    guard.admitted(who, Member(3))  # (the place the client left)
    assert guard.check_subscribe("svc", "x/#") is None


def test_publish_rates_hold_a_publish_back_until_the_buckets_hold_it():
    """A PUBLISH waits (unread) until the buckets hold all it needs, or a full bucket; only what a
    full bucket cannot hold is refused."""
    guard = Guard(policy(limits=Limits(publish_events_per_s=10, publish_bytes_per_s=1000, publish_burst_s=2)),
                  nonces)
    events = [["a", {}, b"x" * 10] for _ in range(25)]
    assert guard.publish_wait_ns("svc", events, 0) == 0  # a full bucket: check it now
    refused = guard.check_publish("svc", events, 0)
    assert sorted(refused) == list(range(20, 25))  # a burst of 2 s at 10 events/s: no more fits ever
    assert {e.code for e in refused.values()} == {"limit-exceeded"}
    assert guard.publish_wait_ns("svc", events[:5], 0) == SECOND_NS // 2  # 5 events refill in 0.5 s
    assert guard.publish_wait_ns("svc", events[:5], SECOND_NS // 2 - 1) == 1
    assert guard.publish_wait_ns("svc", events[:5], SECOND_NS // 2) == 0
    assert guard.check_publish("svc", events[:5], SECOND_NS // 2) == {}
    assert guard.publish_wait_ns("svc", events, SECOND_NS // 2) == 2 * SECOND_NS  # up to a full bucket
    big = [["a", {}, b"x" * 1500]]
    assert guard.publish_wait_ns("svc", big, 100 * SECOND_NS) == 0
    assert guard.check_publish("svc", big, 100 * SECOND_NS) == {}  # 2000 bytes of burst
    assert guard.publish_wait_ns("svc", big, 100 * SECOND_NS) == SECOND_NS  # 500 bytes left, 1000 to come at 1000/s
    assert guard.status()["auth"]["identities"]["svc"]["refusals"] == 5
    assert guard.publish_wait_ns("other", events, 0) == 0  # another identity's own buckets


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 400), st.integers(0, SECOND_NS)), max_size=40))
def test_what_waited_for_its_rate_is_never_refused_for_it(publishes):
    """Whatever PUBLISHes come, at whatever pace: one that waited until `publish_wait_ns` says 0 is
    refused for its rate only beyond a full bucket, and the events taken never exceed the burst
    plus the rate over the time elapsed."""
    rate, burst = 10, 2
    guard = Guard(policy(limits=Limits(publish_events_per_s=rate, publish_bytes_per_s=100 * rate,
                                       publish_burst_s=burst)), nonces)
    now = taken = 0
    for count, size, gap in publishes:
        now += gap
        events = [["a", {}, b"x" * (size // max(count, 1))] for _ in range(count)]
        now += guard.publish_wait_ns("svc", events, now)
        assert guard.publish_wait_ns("svc", events, now) == 0
        refused = guard.check_publish("svc", events, now)
        fits = 0
        room_events, room_bytes = rate * burst, 100 * rate * burst
        for ev in events:
            if fits < room_events and room_bytes >= len(ev[2]):
                fits += 1
                room_bytes -= len(ev[2])
        assert len(refused) == len(events) - fits  # only what a full bucket cannot hold
        taken += len(events) - len(refused)
        assert taken <= rate * burst + rate * now // SECOND_NS

def test_token_bucket_arithmetic_is_exact():
    bucket = TokenBucket(3, 1, now=0)
    assert [bucket.take(0, 1) for _ in range(4)] == [True, True, True, False]
    assert not bucket.take(SECOND_NS // 3, 1)  # 0.999999999 of a token
    assert bucket.take(SECOND_NS // 3 + 1, 1)
    assert bucket.available(10 * SECOND_NS) == 3  # never past its burst


@pytest.mark.parametrize(("data", "message"), [
    ({"identities": {"anonymous": {}}}, "reserved"),
    ({"identities": {"a": {"salt": "x"}}}, "lacks"),
    ({"rules": [{"identity": "a", "allow": "publish", "deny": "publish", "pattern": "x"}]}, "exactly one"),
    ({"rules": [{"identity": "a", "allow": "read", "pattern": "x"}]}, "publish, subscribe or all"),
    ({"rules": [{"identity": "a", "allow": "all", "pattern": "a/#/b"}]}, "must be the last"),
    ({"limits": {"connections_max": 0}}, "positive integer"),
    ({"limits": {"conections_max": 1}}, "unknown key"),
    ({"cluster": {"secret": "c2hvcnQ"}}, "at least 16 bytes"),
])
def test_the_auth_file_is_checked(data, message):
    with pytest.raises(AuthFileError, match=message):
        AuthPolicy.from_mapping(data)


class _Lists:
    """Trees' access lists a node holds, admitting only `admitted` everywhere."""

    def __init__(self, admitted: str) -> None:
        self.admitted = admitted

    def admits_everywhere(self, identity: str) -> bool:
        return identity == self.admitted


def test_only_an_identity_that_may_read_every_channel_may_read_everything():
    """What lets a broker answer a READ with the log's own bytes (SPAN), which hold every channel."""
    from tidings.core.auth.rules import SUBSCRIBE, Rule

    rules = AccessRules([Rule("admin", SUBSCRIBE, True, "#"), Rule("viewer", SUBSCRIBE, True, "load/#")])
    guard = Guard(AuthPolicy({}, rules, None, True, NO_LIMITS), nonces)
    assert guard.may_read_everything("admin", None) and not guard.may_read_everything("viewer", None)
    assert not guard.may_read_everything("admin", _Lists("someone else")), "a tree's list refuses it"
    assert guard.may_read_everything("admin", _Lists("admin"))
    assert Guard(policy(), nonces).may_read_everything("anyone", None), "without rules, everyone may"


def test_admit_publish_looks_at_rules_and_rates_only_while_the_policy_has_some():
    """Without a rule or a publish rate a PUBLISH is admitted at once; a reload that brings either
    applies to the next PUBLISH, and one that takes them away lets it through again."""
    events = [["a", {}, b"x"], ["b", {}, b"y"]]
    guard = Guard(policy(), nonces)
    assert guard.admit_publish("svc", events, 0) == (0, {})
    only_a = AccessRules([Rule(ANY_IDENTITY, PUBLISH, True, "a")])  # "b" is not allowed
    denied = AuthPolicy({}, only_a, None, True, NO_LIMITS)
    guard.reload(denied)
    wait_ns, refused = guard.admit_publish("svc", events, 0)
    assert wait_ns == 0 and list(refused) == [1] and refused[1].code == "forbidden"
    guard.reload(policy(limits=Limits(publish_events_per_s=1, publish_burst_s=1)))
    wait_ns, refused = guard.admit_publish("svc", events, 0)  # a full bucket holds one event
    assert wait_ns == 0 and list(refused) == [1] and refused[1].code == "limit-exceeded"
    assert guard.admit_publish("svc", events[:1], 0) == (SECOND_NS, {})  # the bucket is empty now: wait
    guard.reload(policy())
    assert guard.admit_publish("svc", events, 0) == (0, {})
