"""The auth cores without I/O: the challenge-response both ways, the guard's decisions and counts,
the token buckets, and the auth file's validation."""

import itertools

import pytest

from tidings.core.auth.credentials import Credential, KdfParams, make_verifier
from tidings.core.auth.guard import Guard
from tidings.core.auth.handshake import ClientHandshake, Principal, ServerHandshake
from tidings.core.auth.limits import SECOND_NS, TokenBucket
from tidings.core.auth.policy import AuthFileError, AuthPolicy, Identity, Limits
from tidings.core.auth.rules import AccessRules
from tidings.core.effects import PauseReading, ResumeReading
from tidings.core.errors import TidingsError

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
    assert [(who, code) for who, code, _ in guard.take_refusals()] == [("svc", "limit-exceeded")] * 2
    assert guard.take_refusals() == []  # each is handed to the runtime's log once


def test_publish_rates_with_a_burst_refuse_only_the_excess():
    guard = Guard(policy(limits=Limits(publish_events_per_s=10, publish_bytes_per_s=1000, publish_burst_s=2)),
                  nonces)
    events = [["a", {}, b"x" * 10] for _ in range(25)]
    out = []
    refused = guard.check_publish("svc", 7, events, 0, out)
    assert sorted(refused) == list(range(20, 25))  # a burst of 2 s at 10 events/s
    assert {e.code for e in refused.values()} == {"limit-exceeded"}
    assert out == [PauseReading(7)] and guard.next_deadline() == SECOND_NS // 2  # 5 events refill in 0.5 s
    guard.handle_timeout(SECOND_NS // 2 - 1, out)
    assert out == [PauseReading(7)]
    guard.handle_timeout(SECOND_NS // 2, out)
    assert out == [PauseReading(7), ResumeReading(7)] and guard.next_deadline() is None
    assert guard.check_publish("svc", 7, events[:5], SECOND_NS // 2, out) == {}
    big = [["a", {}, b"x" * 1500]]
    assert guard.check_publish("svc", 7, big, 100 * SECOND_NS, out) == {}  # 2000 bytes of burst
    assert list(guard.check_publish("svc", 7, big, 100 * SECOND_NS, out)) == [0]
    logged = guard.take_refusals()
    assert len(logged) == 2 and logged[0][2].endswith("(and 4 more)")  # one line per PUBLISH frame


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
