"""Whether an event's source authenticated: stamped by the publisher's broker from the handshake,
carried as the record's optional eighth element (absent: not authenticated), and read by every
reader of records, old 7-element ones included."""

import itertools

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.core.auth.credentials import Credential, KdfParams, make_verifier
from tidings.core.auth.guard import Guard
from tidings.core.auth.policy import AuthPolicy, Identity
from tidings.core.auth.rules import AccessRules
from tidings.core.broker.broker import Broker
from tidings.core.config import BrokerConfig
from tidings.core.event import (
    EventRecord,
    event_from_fields,
    own_record_prefix,
    record_channel_bytes,
    record_routing_fields,
)
from tidings.core.inputs import Accepted, LogState
from tidings.core.session.client_session import ClientSession
from tidings.core.wire import messages

from .core_harness import Harness

CRED = Credential("loadmon", b"s" * 32)
COUNTER = itertools.count()


def nonces(n):
    return next(COUNTER).to_bytes(n, "big")


def secured_harness():
    identity = Identity("loadmon", make_verifier(CRED.secret, b"salt" * 4, KdfParams(n=1 << 8)))
    policy = AuthPolicy({"loadmon": identity}, AccessRules([]), None, True, AuthPolicy.open().anonymous_limits)
    h = Harness()
    h.broker = Broker(BrokerConfig(), "p-test", LogState(), guard=Guard(policy, nonces))
    return h


def test_the_broker_stamps_the_flag_from_the_handshake_alone():
    h = secured_harness()
    h.connect(1, service="watcher")
    h.subscribe(1, "load/#")
    h.connect(2, service="visitor")  # anonymous
    session = ClientSession("loadmon", "host-1", CRED, b"c" * 24)
    h.sessions[3] = session
    h.feed(Accepted(h.now, 3))
    h.send(3, session.hello())
    [challenge] = h.inbox(3)
    h.send(3, session.answer(challenge))
    [welcome] = h.inbox(3)
    assert isinstance(welcome, messages.Welcome) and welcome.info["identity"] == "loadmon"
    h.inbox(1)
    h.publish(2, ("load/a", b"anonymous", {}))
    h.publish(3, ("load/a", b"proved", {}))
    h.sync()
    events = [event_from_fields(f) for m in h.inbox(1) if isinstance(m, messages.Events) for f in m.records]
    assert [(e.service, e.payload, e.authenticated) for e in events] == [
        ("visitor", b"anonymous", False), ("loadmon", b"proved", True)]
    logged = [msgpack.unpackb(rec) for _, rec in h.records]
    assert [len(f) for f in logged] == [7, 8] and logged[1][7] is True  # an anonymous record as before


records = st.builds(
    lambda tick, channel, attrs, service, payload, flag: msgpack.packb(
        ["p-1", tick, channel, attrs, service, "i", payload, *flag]),
    st.integers(2**32, 2**52), st.sampled_from(["a", "a/b", "x" * 40, "y" * 300]),
    st.dictionaries(st.text(min_size=1, max_size=5), st.integers(0, 9), max_size=3),
    st.sampled_from(["svc", "loadmon"]), st.binary(max_size=20),
    st.sampled_from([[], [True], [False]]))


@given(records)
def test_every_reader_takes_records_with_and_without_the_flag(record):
    fields = msgpack.unpackb(record)
    event = event_from_fields(fields)
    assert event.authenticated is (len(fields) == 8 and fields[7])
    assert event.to_json()["source"] == {"service": fields[4], "instance": "i", "authenticated": event.authenticated}
    checked = record_routing_fields(record)
    assert checked == EventRecord.decode(record) == EventRecord.of(fields)
    assert (checked.pubend, checked.channel, checked.attributes) == ("p-1", fields[2], fields[3])
    assert checked.encode() == msgpack.packb(fields[:7] + ([True] if event.authenticated else []))  # false: absent
    raw = record_channel_bytes(record, own_record_prefix("p-1"))
    assert raw is None or raw == fields[2].encode()
    assert raw is not None or len(fields[2]) >= 256  # the usual layout is read in place, flag or not
    assert record_channel_bytes(record, own_record_prefix("p-2")) is None


@pytest.mark.parametrize("extra", [[1], ["true"], [None], [True, True]])
def test_anything_but_a_boolean_flag_is_refused(extra):
    fields = ["p-1", 2**40, "a", {}, "svc", "i", b"x", *extra]
    assert record_routing_fields(msgpack.packb(fields)) is None
    with pytest.raises(ValueError, match=r"wrong type|7-element"):
        event_from_fields(fields)


@pytest.mark.parametrize(("attributes", "kept"), [
    ({}, {}), (None, {}), ({"n": 1, "s": "x"}, {"n": 1, "s": "x"}),
    (0, None), ("", None), ([], None), (False, None), ([["n", 1]], None), ({"n": [1]}, None), ({"": 1}, None),
])
def test_a_peers_record_keeps_only_a_map_of_valid_attributes(attributes, kept):
    checked = record_routing_fields(msgpack.packb(["p-1", 2**40, "a", attributes, "svc", "i", b"x"]))
    assert (None if checked is None else checked.attributes) == kept
