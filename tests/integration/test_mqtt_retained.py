"""Retained messages across a 3-broker overlay (issue 23; core/mqtt/retained.py): a retained PUBLISH
at one broker reaches a new subscriber at another (with RETAIN 1, through a wildcard), an empty
retained payload deletes it, and a kill -9 and restart of the publisher's broker keeps it (the
restarted broker reads the retained events of the logs again); a new subscriber gets each retained
message once, though its subscription reaches back to the same event."""

import queue
import time

import pytest

from tidings.aio.auth_file import add_identity
from tidings.core.auth.credentials import KdfParams, b64, parse_credential
from tidings.testing import LOCAL_LIVENESS, Cluster, wait_for

from .mqtt_io import V5, V311, Mqtt, until_delivered

pytestmark = pytest.mark.integration
DEADLINE_S = 30.0
FAST_KDF = KdfParams(n=1 << 10)  # cheap scrypt, same protocol
QUIET_S = 0.3  # a new subscription's retained messages come right after its SUBACK: then silence
REACH_BACK_S = 0.8  # a SUBACK this soon after the retained PUBLISHes: they are in its reach-back (1 s)
ATTEMPTS_MAX = 5


def retained_at(address: str, topic_filter: str, client_id: str, version: int = V5,
                retain_handling: int = 0, login: tuple[str, str] | None = None) -> dict[str, tuple[bytes, bool]]:
    """What a new subscription to `topic_filter` gets at once: topic -> (payload, retain flag), until
    QUIET_S pass without a message (`login`: the user name and password to connect with)."""
    sub = Mqtt(address, client_id, version, *(login or ()))
    try:
        assert sub.subscribe(topic_filter, qos=1, retain_handling=retain_handling) == [1]
        got: dict[str, tuple[bytes, bool]] = {}
        while True:
            try:
                msg = sub.get(QUIET_S)
            except queue.Empty:
                return got
            got[msg.topic] = (msg.payload, msg.retain)
    finally:
        sub.close()


def until_retained(address: str, topic_filter: str, wanted: dict[str, tuple[bytes, bool]], name: str,
                   version: int = V5, login: tuple[str, str] | None = None) -> dict[str, tuple[bytes, bool]]:
    """Subscribe anew until the retained set seen is `wanted` (the retained event crosses the overlay
    first; a loaded machine may be slower than QUIET_S), or the deadline: the last set seen."""
    deadline = time.monotonic() + DEADLINE_S
    n = 0
    got = retained_at(address, topic_filter, f"{name}-{n}", version, login=login)
    while got != wanted and time.monotonic() < deadline:
        n += 1
        got = retained_at(address, topic_filter, f"{name}-{n}", version, login=login)
    return got


def test_retained_across_brokers_deleted_and_through_kill_9(tmp_path):
    """Published in 3.1.1 at A, deleted in 5.0 at A; subscribers of both versions at C, and at A after
    its kill -9 and restart (its retained set read again from the logs)."""
    with Cluster(tmp_path, 3, LOCAL_LIVENESS, args=["--mqtt", "127.0.0.1:0"]) as cluster:
        a, c = cluster[0], cluster[2]
        pub = Mqtt(a.mqtt_address, "retainer", V311)
        try:
            assert pub.publish("home/kitchen/temp", b"21.5", qos=1, retain=True) == 0
            assert pub.publish("home/hall/temp", b"19", qos=1, retain=True) == 0
            assert pub.publish("home/hall/temp", b"19.5", qos=1, retain=True) == 0  # replaces 19
            assert pub.publish("home/hall/noise", b"not retained", qos=1) == 0
        finally:
            pub.close()
        wanted = {"home/kitchen/temp": (b"21.5", True), "home/hall/temp": (b"19.5", True)}
        for version in (V311, V5):
            assert until_retained(c.mqtt_address, "home/+/temp", wanted, f"c-sub-{version}", version) == wanted
            assert until_retained(c.mqtt_address, "home/#", wanted, f"c-all-{version}", version) == wanted
        one = {"home/kitchen/temp": (b"21.5", True)}
        assert until_retained(c.mqtt_address, "home/kitchen/temp", one, "c-one") == one
        assert retained_at(c.mqtt_address, "home/#", "c-none", retain_handling=2) == {}  # never at subscribe

        deleter = Mqtt(a.mqtt_address, "deleter", V5)
        try:
            assert deleter.publish("home/kitchen/temp", b"", qos=1, retain=True) == 0  # deletes it
        finally:
            deleter.close()
        rest = {"home/hall/temp": (b"19.5", True)}
        assert until_retained(c.mqtt_address, "home/#", rest, "c-del") == rest

        cluster.kill(a)
        a.start()
        cluster.wait_joined(60.0)
        for version in (V311, V5):
            assert until_retained(a.mqtt_address, "home/#", rest, f"a-back-{version}", version) == rest
        assert until_retained(c.mqtt_address, "home/#", rest, "c-after") == rest


def test_a_live_delivery_keeps_its_retain_flag_only_as_published(tmp_path):
    """3.3.1.3: a message forwarded to an existing subscription has RETAIN 0, unless the 5.0
    subscription asked for Retain As Published."""
    with Cluster(tmp_path, 1, LOCAL_LIVENESS, args=["--mqtt", "127.0.0.1:0"]) as cluster:
        address = cluster[0].mqtt_address
        plain, kept = Mqtt(address, "plain", V5), Mqtt(address, "kept", V5)
        pub = Mqtt(address, "pub", V5)
        try:
            assert plain.subscribe("live/#", qos=1) == [1]
            assert kept.subscribe("live/#", qos=1, retain_as_published=True) == [1]
            until_delivered(lambda n: pub.publish(f"live/probe{n}", b"p", qos=0), kept.get)
            assert pub.publish("live/x", b"v", qos=1, retain=True) == 0
            for client, flag in ((plain, False), (kept, True)):
                msg = client.get()
                while msg.topic != "live/x":
                    msg = client.get()
                assert (msg.payload, msg.retain) == (b"v", flag)
        finally:
            for client in (plain, kept, pub):
                client.close()


def test_retained_messages_on_auth_brokers_without_anonymous_access(tmp_path):
    """Two brokers with one auth file (rules, no anonymous client): each broker's retained feed is its
    own connection (core/auth/guard.py `vouched`), so a retained message published by `sensor` at one
    broker reaches `viewer` subscribing at the other, with RETAIN 1; on main the feed was refused
    (Retain Available 0)."""
    auth = tmp_path / "auth.toml"
    creds = {"sensor": add_identity(auth, "sensor", ["*"], ["sensors/#"], ["sensors/#"], FAST_KDF),
             "viewer": add_identity(auth, "viewer", ["*"], [], ["sensors/#"], FAST_KDF)}
    login = {name: (name, b64(parse_credential(str(cred)).secret)) for name, cred in creds.items()}
    with Cluster(tmp_path / "c", 2, LOCAL_LIVENESS, credential=str(creds["viewer"]),
                 args=["--auth", str(auth), "--mqtt", "127.0.0.1:0"]) as cluster:
        for broker in cluster.brokers:
            wait_for(lambda b=broker: b.status()["mqtt"]["retained_feed"] == "open", DEADLINE_S,
                     what="the retained feed open")
        pub = Mqtt(cluster[0].mqtt_address, "auth-pub", V5, *login["sensor"])
        try:
            assert pub.publish("sensors/kitchen", b"21.5", qos=1, retain=True) == 0
        finally:
            pub.close()
        wanted = {"sensors/kitchen": (b"21.5", True)}
        assert until_retained(cluster[1].mqtt_address, "sensors/+", wanted, "auth-sub", login=login["viewer"]) == wanted
        assert until_retained(cluster[0].mqtt_address, "sensors/#", wanted, "auth-here", V311,
                              login=login["viewer"]) == wanted


def test_a_new_subscriber_on_another_broker_gets_each_retained_message_once(tmp_path):
    """Issue 23 (/work/wt/scen2.py): retained messages published at A, then a subscription at B within
    the clock-skew allowance (1 s) of them: it reaches back on A's pubend (docs/delivery.md "The start
    point"), so each came twice, with RETAIN 1 (the retained copy) and RETAIN 0 (the live one). Now
    once, with RETAIN 1: 3.1.1 and 5.0, clean and persistent sessions. A plain message published at
    A after the SUBACK marks the end: A's events reach the subscription in A's order, so a live copy
    comes before it."""
    with Cluster(tmp_path, 3, LOCAL_LIVENESS, args=["--mqtt", "127.0.0.1:0"]) as cluster:
        a, b = cluster[0], cluster[1]
        pub = Mqtt(a.mqtt_address, "once-pub", V5)
        try:
            for version, clean in ((V311, True), (V5, True), (V311, False), (V5, False)):
                for attempt in range(ATTEMPTS_MAX):
                    prefix = f"once/{version}-{int(clean)}-{attempt}"
                    wanted = [(f"{prefix}/t{i}", b"v%d" % i, True) for i in range(3)]
                    held = b.status()["mqtt"]["retained_topics"]
                    for topic, payload, _ in wanted:
                        assert pub.publish(topic, payload, qos=1, retain=True) == 0
                    published = time.monotonic()
                    wait_for(lambda held=held: b.status()["mqtt"]["retained_topics"] >= held + 3, DEADLINE_S,
                             what="the retained messages at B")
                    sub = Mqtt(b.mqtt_address, f"once-{version}-{int(clean)}-{attempt}", version, clean=clean)
                    try:
                        assert sub.subscribe(f"{prefix}/#", qos=1) == [1]
                        if time.monotonic() - published > REACH_BACK_S:  # (a loaded machine: not in reach)
                            continue
                        assert pub.publish(f"{prefix}/end", b"end", qos=1) == 0
                        got = []
                        deadline = time.monotonic() + DEADLINE_S
                        while time.monotonic() < deadline:
                            msg = sub.get(max(0.0, deadline - time.monotonic()))
                            if msg.topic == f"{prefix}/end":
                                break
                            got.append((msg.topic, msg.payload, msg.retain))
                        assert sorted(got) == wanted, (version, clean)
                        break
                    finally:
                        sub.close()
                else:
                    pytest.fail(f"no SUBACK within {REACH_BACK_S} s of the PUBLISHes in {ATTEMPTS_MAX} attempts")
        finally:
            pub.close()
