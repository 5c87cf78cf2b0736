"""MQTT shared subscriptions across the overlay (issue 23; docs/mqtt.md "Shared subscriptions").

Three real brokers with MQTT ports; paho 5.0 members of one group on two different brokers and a
publisher on the third. The group's home is the broker whose node id is closest to the group's key
(core/share/wire.py `group_key`), so each test picks a group name whose home is the broker it wants.
Every wait has a deadline; the group's subscription joins its channel's tree first, so probes are
published until one arrives."""

from __future__ import annotations

import queue
import time
import urllib.request

import pytest

from tidings.aio.auth_file import add_identity
from tidings.core.auth.credentials import KdfParams, b64, parse_credential
from tidings.core.overlay.node_id import node_id_from, ring_distance
from tidings.core.share.wire import group_key
from tidings.testing import LOCAL_LIVENESS, Cluster

from .mqtt_io import V5, Mqtt, until_delivered

pytestmark = pytest.mark.integration
WAIT_S = 30.0
SCOPE = "anonymous"  # an anonymous client's identity: the groups' scope
FAST_KDF = KdfParams(n=1 << 10)  # cheap scrypt, same protocol


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(tmp_path_factory.mktemp("shared"), 3, LOCAL_LIVENESS, http=True,
                 args=["--mqtt", "127.0.0.1:0"]) as c:
        yield c


def home_of(brokers, name, topic_filter, scope=SCOPE):
    key = group_key((scope, name, topic_filter))
    return min(brokers, key=lambda b: (ring_distance(key, node_id_from(b.pubend)), node_id_from(b.pubend)))


def group_homed_at(brokers, home, topic_filter, prefix, scope=SCOPE):
    """A group name whose home among `brokers` is `home`."""
    return next(n for n in (f"{prefix}{i}" for i in range(1 << 20))
                if home_of(brokers, n, topic_filter, scope) is home)


def collect(members, wanted, deadline_s=WAIT_S):
    """Messages from `members` until every payload of `wanted` came: {payload: [member index, ...]}."""
    got: dict[bytes, list[int]] = {}
    deadline = time.monotonic() + deadline_s
    while not wanted <= got.keys():
        assert time.monotonic() < deadline, f"missing {sorted(wanted - got.keys())[:10]}"
        for i, member in enumerate(members):
            try:
                msg = member.messages.get(timeout=0.05)
            except queue.Empty:
                continue
            got.setdefault(msg.payload, []).append(i)
    return got


def settle(pub, topic, members, got):
    """Sentinels until every member received one: what was handed to each before is then in (a
    home sends a member broker its deliveries in order on one link)."""
    seen: set[int] = set()
    deadline = time.monotonic() + WAIT_S
    n = 0
    while len(seen) < len(members):
        assert time.monotonic() < deadline, "a member got no sentinel"
        pub.publish(topic, f"sentinel-{n}".encode(), qos=1)
        n += 1
        for i, member in enumerate(members):
            try:
                while True:
                    msg = member.messages.get(timeout=0.05)
                    if msg.payload.startswith(b"sentinel"):
                        seen.add(i)
                    else:
                        got.setdefault(msg.payload, []).append(i)
            except queue.Empty:
                pass


def metrics(broker):
    """The broker's /metrics, {name: value} for the figures without labels."""
    with urllib.request.urlopen(f"http://{broker.http_address}/metrics", timeout=10) as reply:
        lines = reply.read().decode().splitlines()
    return {name: float(value) for name, _, value in (line.partition(" ") for line in lines)
            if name and not name.startswith("#") and "{" not in name}


def warm(pub, topic, members):
    """Probes until one reaches a member (the home's subscription joined its tree); the rest drained."""
    def receive(timeout):
        for member in members:
            try:
                return member.messages.get(timeout=timeout / len(members))
            except queue.Empty:
                continue
        return None
    until_delivered(lambda n: pub.publish(topic, f"probe-{n}".encode(), qos=0), receive, timeout=WAIT_S)
    settle(pub, topic, members, {})
    for member in members:
        while not member.messages.empty():
            member.messages.get_nowait()


def test_each_message_reaches_exactly_one_member_across_brokers(cluster):
    """Members on brokers 0 and 1, the publisher on broker 2, the group's home broker 0."""
    topic_filter = "shared/spread/#"
    name = group_homed_at(cluster.brokers, cluster[0], topic_filter, "spread")
    members = [Mqtt(cluster[0].mqtt_address, "spread-m0", V5), Mqtt(cluster[1].mqtt_address, "spread-m1", V5)]
    pub = Mqtt(cluster[2].mqtt_address, "spread-pub", V5)
    try:
        for member in members:
            assert member.subscribe(f"$share/{name}/{topic_filter}", qos=1) == [1]
        warm(pub, "shared/spread/probe", members)
        wanted = {f"m{i}".encode() for i in range(300)}
        for payload in sorted(wanted):
            pub.publish("shared/spread/x", payload, qos=1, wait=False)
        got = collect(members, wanted)
        settle(pub, "shared/spread/s", members, got)
        home, member = metrics(cluster[0]), metrics(cluster[1])
    finally:
        for client in (*members, pub):
            client.close()
    assert home["tidings_mqtt_share_groups_homed"] >= 1 and home["tidings_mqtt_share_deliveries_total"] >= 300
    assert member["tidings_mqtt_share_groups_joined"] >= 1 and member["tidings_mqtt_share_members"] >= 1
    assert home["tidings_mqtt_share_queued_bytes"] == 0 and "tidings_mqtt_share_returned_total" in member
    counts = [sum(1 for who in got.values() if who == [i]) for i in range(2)]
    assert {p for p, who in got.items() if len(who) != 1} == set(), "a message came more than once"
    assert set(got) == wanted
    assert min(counts) >= 100, f"round robin spread {counts}"


def test_a_member_that_leaves_holding_unacknowledged_messages_has_them_sent_to_another(cluster):
    """The holder (broker 0) never PUBACKs; when it disconnects, the taker (broker 1) gets all it held."""
    topic_filter = "shared/leave/#"
    name = group_homed_at(cluster.brokers, cluster[2], topic_filter, "leave")
    holder = Mqtt(cluster[0].mqtt_address, "leave-holder", V5)
    holder.client.manual_ack_set(True)  # paho sends no PUBACK until told: none is
    taker = Mqtt(cluster[1].mqtt_address, "leave-taker", V5)
    pub = Mqtt(cluster[2].mqtt_address, "leave-pub", V5)
    members = [holder, taker]
    try:
        for member in members:
            assert member.subscribe(f"$share/{name}/{topic_filter}", qos=1) == [1]
        until_delivered(lambda n: pub.publish("shared/leave/probe", f"probe-{n}".encode(), qos=0),
                        taker.get, timeout=WAIT_S)  # (QoS 0 probes: done when sent)
        wanted = {f"m{i}".encode() for i in range(60)}
        for payload in sorted(wanted):
            pub.publish("shared/leave/x", payload, qos=1, wait=False)
        got = collect(members, wanted)
        held = {p for p, who in got.items() if 0 in who and p in wanted}
        assert held, "the holder got none"
        holder.close()
        again = collect([taker], held)
        settle(pub, "shared/leave/s", [taker], again)
    finally:
        for client in (taker, pub):
            client.close()
    assert held <= again.keys()
    assert {p for p, who in got.items() if 1 in who} | held == wanted


def test_a_member_that_never_acknowledges_costs_the_home_at_most_its_bound(cluster):
    """The only member (broker 0) sends no PUBACK; 8 MiB are published at broker 1, one 64 KiB
    event at a time. The home (broker 2) holds what waits under share_queued_bytes_max (4 MiB, the
    default) and one event, its subscription paced; a second member (broker 1) then gets every
    event the first did not hold, those past the bound read back from the log, in order."""
    topic_filter = "shared/slow/#"
    name = group_homed_at(cluster.brokers, cluster[2], topic_filter, "slow")
    holder = Mqtt(cluster[0].mqtt_address, "slow-holder", V5)
    holder.client.manual_ack_set(True)  # paho sends no PUBACK until told: none is
    pub = Mqtt(cluster[1].mqtt_address, "slow-pub", V5)
    taker = None
    try:
        assert holder.subscribe(f"$share/{name}/{topic_filter}", qos=1) == [1]
        until_delivered(lambda n: pub.publish("shared/slow/probe", f"probe-{n}".encode(), qos=0),
                        holder.get, timeout=WAIT_S)  # (QoS 0 probes: done when sent)
        wanted = [b"%03d" % i + b"x" * (64 << 10) for i in range(128)]
        for payload in wanted:
            assert pub.publish("shared/slow/x", payload, qos=1) == 0
        held = [m.payload for m in collect_n(holder, 32)]

        def group():
            groups = cluster[2].status()["mqtt"]["share_groups_homed"]
            return next((g for g in groups if g["group"] == name and g["queued"] + g["unacked"] >= 64), None)
        homed = cluster.wait(group, WAIT_S, "the events past the holder's window at the home")
        assert homed["paced"] and homed["queued_bytes"] <= (4 << 20) + (65 << 10), homed
        taker = Mqtt(cluster[1].mqtt_address, "slow-taker", V5)
        assert taker.subscribe(f"$share/{name}/{topic_filter}", qos=1) == [1]
        rest = [m.payload for m in collect_n(taker, len(wanted) - len(held), deadline_s=60.0)]
    finally:
        for client in (holder, pub, *([taker] if taker else [])):
            client.close()
    assert held == [p for p in wanted if p in set(held)] and held
    assert rest == [p for p in wanted if p not in set(held)]


def collect_twice(member, wanted, deadline_s=WAIT_S):
    """{payload: times received} of `member` until each of `wanted` came twice (probes left out)."""
    got: dict[bytes, int] = {}
    deadline = time.monotonic() + deadline_s
    while any(got.get(p, 0) < 2 for p in wanted):
        assert time.monotonic() < deadline, f"missing {sorted(p for p in wanted if got.get(p, 0) < 2)[:10]}"
        try:
            msg = member.messages.get(timeout=0.1)
        except queue.Empty:
            continue
        if not msg.payload.startswith((b"probe", b"sentinel")):
            got[msg.payload] = got.get(msg.payload, 0) + 1
    return got


def collect_n(member, n, deadline_s=WAIT_S):
    """The next `n` messages of `member` that are not probes."""
    out = []
    deadline = time.monotonic() + deadline_s
    while len(out) < n:
        assert time.monotonic() < deadline, f"{len(out)} of {n} came"
        try:
            msg = member.messages.get(timeout=0.1)
        except queue.Empty:
            continue
        if not msg.payload.startswith(b"probe"):
            out.append(msg)
    return out


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """Three brokers with one auth file (its cluster secret, no anonymous client): `worker` and
    `other` may publish and subscribe `jobs/#`; `capped` too, with one connection and two
    subscriptions per broker."""
    root = tmp_path_factory.mktemp("shared-secured")
    auth = root / "auth.toml"
    creds = {name: add_identity(auth, name, [], ["jobs/#"], ["jobs/#"], FAST_KDF) for name in ("worker", "other")}
    creds["capped"] = add_identity(auth, "capped", [], ["jobs/#"], ["jobs/#"], FAST_KDF,
                                   limits={"connections_max": 1, "subscriptions_max": 2})
    with Cluster(root, 3, LOCAL_LIVENESS, http=True, credential=str(creds["worker"]),
                 args=["--auth", str(auth), "--mqtt", "127.0.0.1:0"]) as c:
        yield c, {name: b64(parse_credential(str(cred)).secret) for name, cred in creds.items()}


def test_members_with_a_password_on_different_brokers_share_as_their_identity(secured):
    """On brokers that let no anonymous client in, `worker` members on brokers 0 and 1 form a group
    homed at broker 2 (where the publisher is): the home subscribes as `worker`, and each message
    reaches one of them. An `other` member of the same `$share/NAME/FILTER` is another group (the
    key is scoped by identity): it gets every message, and takes none from worker's members."""
    cluster, passwords = secured
    topic_filter = "jobs/#"
    name = group_homed_at(cluster.brokers, cluster[2], topic_filter, "auth", scope="worker")
    members = [Mqtt(cluster[i].mqtt_address, f"auth-m{i}", V5, "worker", passwords["worker"]) for i in (0, 1)]
    other = Mqtt(cluster[0].mqtt_address, "auth-other", V5, "other", passwords["other"])
    pub = Mqtt(cluster[2].mqtt_address, "auth-pub", V5, "worker", passwords["worker"])
    try:
        for member in (*members, other):
            assert member.subscribe(f"$share/{name}/{topic_filter}", qos=1) == [1]
        warm(pub, "jobs/probe", [*members, other])
        wanted = {f"j{i}".encode() for i in range(200)}
        for payload in sorted(wanted):
            pub.publish("jobs/x", payload, qos=1, wait=False)
        got = collect(members, wanted)
        settle(pub, "jobs/s", members, got)
        others = collect([other], wanted)
    finally:
        for client in (*members, other, pub):
            client.close()
    assert {p for p, who in got.items() if len(who) != 1} == set(), "a message came more than once"
    assert set(got) == wanted and min(sum(1 for who in got.values() if who == [i]) for i in range(2)) >= 50
    assert wanted <= others.keys()
    homed = {(g["scope"], g["group"]): g for g in cluster[2].status()["mqtt"]["share_groups_homed"]}
    assert "refusal" not in homed[("worker", name)] and homed[("worker", name)]["handed"] >= len(wanted)


def test_groups_at_their_home_are_not_held_against_the_identitys_connections_max(secured):
    """`capped` may have one connection and two subscriptions per broker. Its one member (broker 0)
    makes two groups homed at broker 2, each on its own connection there; its publisher, its one
    connection at broker 2, is let in beside them, and each group gets every message. A third group
    at broker 2 is refused there by subscriptions_max, the bound of one identity's groups at a home."""
    cluster, passwords = secured
    homes = [cluster[2]]
    names = [n for n in (f"cap{i}" for i in range(1 << 20))
             if home_of(cluster.brokers, n, "jobs/#", "capped") in homes][:3]
    member = Mqtt(cluster[0].mqtt_address, "cap-m", V5, "capped", passwords["capped"])
    pub = None
    try:
        for name in names[:2]:
            assert member.subscribe(f"$share/{name}/jobs/#", qos=1) == [1]

        def groups(want):
            homed = {g["group"]: g for g in cluster[2].status()["mqtt"]["share_groups_homed"] if g["scope"] == "capped"}
            return homed if set(want) <= homed.keys() and all(homed[n]["state"] == "open" for n in want) else None
        cluster.wait(lambda: groups(names[:2]), WAIT_S, "both groups open at their home")
        pub = Mqtt(cluster[2].mqtt_address, "cap-pub", V5, "capped", passwords["capped"])  # refused on main
        warm(pub, "jobs/cap/probe", [member])
        wanted = {f"c{i}".encode() for i in range(20)}
        for payload in sorted(wanted):
            pub.publish("jobs/cap/x", payload, qos=1, wait=False)
        got = collect_twice(member, wanted)
        assert member.subscribe(f"$share/{names[2]}/jobs/#", qos=1) == [1]  # (the member's broker checks the rules)

        def refused():
            homed = {g["group"]: g for g in cluster[2].status()["mqtt"]["share_groups_homed"]}
            return homed.get(names[2], {}).get("refusal")
        refusal = cluster.wait(refused, WAIT_S, "the third group refused at its home")
        counted = cluster[2].status()["auth"]["identities"]["capped"]
    finally:
        for client in (member, *([pub] if pub else [])):
            client.close()
    assert set(got) == wanted and set(got.values()) == {2}, "each of the two groups delivers every message once"
    assert "subscriptions_max=2" in refusal
    assert counted["connections"] == 3  # the publisher and the two groups' connections


def test_the_group_resumes_on_a_new_home_when_its_home_is_killed(cluster):
    """The home (broker 2, no member there) is killed -9 while the holder (broker 1) holds messages
    unacknowledged; the holder then leaves. The members' brokers re-join the next closest broker
    with the position the home last gave them, so the taker (broker 0) gets every message the holder
    held (published over a second before the new home subscribed: a group started anew would not
    have them) and every message PUBACKed after the kill. Runs last in this module: broker 2 is
    restarted after it."""
    topic_filter = "shared/home/#"
    name = group_homed_at(cluster.brokers, cluster[2], topic_filter, "home")
    taker = Mqtt(cluster[0].mqtt_address, "home-taker", V5)
    holder = Mqtt(cluster[1].mqtt_address, "home-holder", V5)
    pub = Mqtt(cluster[1].mqtt_address, "home-pub", V5)
    members = [taker, holder]
    try:
        for member in members:
            assert member.subscribe(f"$share/{name}/{topic_filter}", qos=1) == [1]
        warm(pub, "shared/home/probe", members)
        holder.client.manual_ack_set(True)  # from now on it sends no PUBACK
        before = {f"before-{i}".encode() for i in range(40)}
        for payload in sorted(before):
            assert pub.publish("shared/home/x", payload, qos=1) == 0
        got = collect(members, before)
        held = {p for p, who in got.items() if 1 in who}
        assert held, "the holder got none"
        cluster[2].kill()
        holder.close()
        after = {f"after-{i}".encode() for i in range(50)}
        for payload in sorted(after):
            assert pub.publish("shared/home/x", payload, qos=1) == 0  # PUBACKed: fsynced at broker 1
        again = collect([taker], held | after, deadline_s=60.0)
    finally:
        for client in (taker, pub):
            client.close()
        cluster[2].restart()  # (stop reaps the killed process; then started again)
    assert held | after <= again.keys()
    new_home = [b.status()["mqtt"]["share_groups_homed"] for b in cluster.brokers[:2]]
    assert [g["group"] for groups in new_home for g in groups if g["group"] == name] == [name]
