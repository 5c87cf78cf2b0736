"""A shared subscription group's hand-over between homes (docs/mqtt.md "Shared subscriptions";
core/share/handover.py), with real brokers.

The brokers' pubends (so their node ids) are fixed, so the group is picked with its home at broker
2 among brokers 0-2 and at broker 3 once broker 3 is in the overlay. Members are on brokers 0 and
1, the publisher on broker 0. Every wait has a deadline."""

from __future__ import annotations

import functools

import pytest

from tidings.storage import load_or_create_identity
from tidings.testing import LOCAL_LIVENESS, BrokerProcess, Cluster

from .mqtt_io import V5, Mqtt
from .test_mqtt_shared import WAIT_S, collect, home_of, settle, warm

pytestmark = pytest.mark.integration
PUBENDS = ["handover-p0", "handover-p1", "handover-p2", "handover-p3"]
TOPIC_FILTER = "shared/handover/#"
ARGS = ["--mqtt", "127.0.0.1:0"]


def homed(broker, name):
    """The group `name` as `broker`'s status lists it among the groups homed there (None: not)."""
    groups = broker.status()["mqtt"]["share_groups_homed"]
    return next((g for g in groups if g["group"] == name and g["state"] == "open"), None)


def figures(broker):
    status = broker.status()
    return {**status["mqtt"], **{k: v for k, v in status.items() if k.startswith("durable_")}}


def test_the_old_home_stops_at_once_and_a_killed_one_forgets_the_group_when_it_is_back(tmp_path):
    """(1) Broker 3 joins, so the members' JOINs reach it: it takes the group over from the position
    the members' brokers hold, which names broker 2, and tells broker 2 (SHARE_MOVED), which is
    alive: broker 2 stops the group at once (counted as handed over) and ends its durable
    subscription (no registration left there), rather than handing out events until the members'
    brokers were silent for 3 s. (2) Broker 3 is then killed -9: the group goes back to broker 2,
    which owes broker 3 a SHARE_MOVED it cannot deliver. Broker 3 restarted (home again, from
    broker 2's position) gets it: the registration it restored away from its saved state is
    forgotten (else it held release for durable_expiry_ns), and both debts are answered. Every
    message published is received throughout."""
    load_or_create_identity(tmp_path / "broker-3", functools.partial(str, PUBENDS[3]))
    with Cluster(tmp_path, 3, LOCAL_LIVENESS, identities=PUBENDS[:3], http=True, args=ARGS) as cluster:
        late = BrokerProcess(tmp_path / "broker-3", LOCAL_LIVENESS, join=cluster[0].address, http=True, args=ARGS)
        late.pubend = PUBENDS[3]
        name = next(n for n in (f"move{i}" for i in range(1 << 20))
                    if home_of(cluster.brokers, n, TOPIC_FILTER) is cluster[2]
                    and home_of([*cluster.brokers, late], n, TOPIC_FILTER) is late)
        members = [Mqtt(cluster[0].mqtt_address, "handover-m0", V5), Mqtt(cluster[1].mqtt_address, "handover-m1", V5)]
        pub = Mqtt(cluster[0].mqtt_address, "handover-pub", V5)
        got: dict[bytes, list[int]] = {}

        def send(batch):
            wanted = {f"{batch}-{i}".encode() for i in range(30)}
            for payload in sorted(wanted):
                assert pub.publish("shared/handover/x", payload, qos=1) == 0
            got.update(collect(members, wanted, deadline_s=60.0))
            return wanted

        try:
            for member in members:
                assert member.subscribe(f"$share/{name}/{TOPIC_FILTER}", qos=1) == [1]
            warm(pub, "shared/handover/probe", members)
            wanted = send("a")

            cluster.brokers.append(late)  # (stopped with the cluster)
            late.start()
            cluster.wait_joined()
            cluster.wait(lambda: homed(late, name), WAIT_S, "the group homed at broker 3")
            cluster.wait(lambda: figures(cluster[2])["share_handed_over"] >= 1, WAIT_S,
                         "broker 2 stopped by broker 3's SHARE_MOVED")
            cluster.wait(lambda: homed(cluster[2], name) is None and figures(cluster[2])["durable_registrations"] == 0,
                         WAIT_S, "the group and its registration gone from broker 2")
            cluster.wait(lambda: figures(late)["share_moved_owed"] == 0, WAIT_S, "broker 2's SHARE_LEFT")
            wanted |= send("b")

            cluster.kill(late)
            cluster.wait(lambda: homed(cluster[2], name), WAIT_S, "the group homed at broker 2 again")
            wanted |= send("c")  # (delivered by broker 2: the members' position names it)
            assert figures(cluster[2])["share_moved_owed"] == 1  # broker 3 is down

            cluster.restart(late)
            cluster.wait(lambda: homed(late, name), WAIT_S, "the group homed at the restarted broker 3")
            back = cluster.wait(lambda: (f := figures(late))["durable_away"] == 0 and f, WAIT_S,
                                "broker 3's restored registration of the group forgotten")
            cluster.wait(lambda: figures(cluster[2])["share_moved_owed"] == 0, WAIT_S,
                         "broker 3's SHARE_LEFT to broker 2")
            cluster.wait(lambda: figures(late)["share_moved_owed"] == 0, WAIT_S, "broker 2's SHARE_LEFT to broker 3")
            cluster.wait(lambda: figures(cluster[2])["share_handed_over"] >= 2, WAIT_S,
                         "broker 2 stopped by the restarted broker 3")
            wanted |= send("d")
            settle(pub, "shared/handover/s", members, got)
            again = figures(cluster[2])
        finally:
            for client in (*members, pub):
                client.close()
    assert wanted <= got.keys()
    assert back["durable_registrations"] == 1  # the group's, live
    assert again["durable_registrations"] == 0 and again["share_moved_owed"] == 0


def test_a_home_killed_while_its_group_had_no_member_forgets_the_group_when_it_is_back(tmp_path):
    """The group's only member (broker 0) leaves, and its home (broker 2) is killed -9 within the
    group's empty keep: no member broker will make a new home take the group over. Broker 0 goes on
    telling the group's home the position it held (JOINs without members, empty_tell_ns), which
    reach the next home once broker 2 is found dead; that broker owes broker 2 a SHARE_MOVED, which
    the restarted broker 2 gets: the group's registration it restored away is forgotten."""
    with Cluster(tmp_path, 3, LOCAL_LIVENESS, identities=PUBENDS[:3], http=True, args=ARGS) as cluster:
        home = cluster[2]
        name = next(n for n in (f"gone{i}" for i in range(1 << 20))
                    if home_of(cluster.brokers, n, TOPIC_FILTER) is home)
        member = Mqtt(cluster[0].mqtt_address, "handover-gone", V5)
        pub = Mqtt(cluster[0].mqtt_address, "handover-gone-pub", V5)
        try:
            assert member.subscribe(f"$share/{name}/{TOPIC_FILTER}", qos=1) == [1]
            warm(pub, "shared/handover/probe", [member])
            wanted = {f"e-{i}".encode() for i in range(10)}
            for payload in sorted(wanted):
                assert pub.publish("shared/handover/x", payload, qos=1) == 0
            collect([member], wanted)
        finally:
            member.close()
            pub.close()
        cluster.wait(lambda: homed(home, name) and homed(home, name)["members"] == 0, WAIT_S, "the group empty")
        cluster.kill(home)
        others = cluster.brokers[:2]
        cluster.wait(lambda: sum(figures(b)["share_moved_owed"] for b in others) == 1, WAIT_S,
                     "the next home owing broker 2 a SHARE_MOVED")
        cluster.restart(home)
        back = cluster.wait(lambda: (f := figures(home))["durable_away"] == 0 and f, WAIT_S,
                            "broker 2's restored registration of the group forgotten")
        cluster.wait(lambda: sum(figures(b)["share_moved_owed"] for b in others) == 0, WAIT_S,
                     "broker 2's SHARE_LEFT")
    assert back["durable_registrations"] == 0 and not back["share_groups_homed"]
