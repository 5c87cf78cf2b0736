"""A tree's access list in real processes: three brokers share a cluster secret and identities but
not rules. The creator broker A lets only `owner` subscribe; the subscriber's broker B also lets
`viewer` subscribe; the rendez-vous point R (neither of them) holds A's list, so viewer's
subscription at B is refused with `forbidden` and served nothing. A reload of A's file (SIGHUP)
that lets viewer in changes the list at R: viewer's next subscription is served; a second reload
that leaves viewer out again ends that live subscription."""

import shutil
import signal

import pytest

from tidings import sync
from tidings.aio.auth_file import add_identity
from tidings.core.auth.credentials import KdfParams
from tidings.core.errors import BrokerError
from tidings.core.multicast.trees import tree_key
from tidings.core.overlay.node_id import node_id_from, ring_distance
from tidings.testing import BrokerProcess
from tidings.testing.broker_process import wait_for

pytestmark = pytest.mark.integration
FAST_KDF = KdfParams(n=1 << 10)
VIEWER_RULE = '\n[[rules]]\nidentity = "viewer"\nallow = "subscribe"\npattern = "#"\n'


def tree_status(broker, tree):
    return next((t for t in broker.status()["trees"] if t["name"] == tree), None)


def root_of(brokers, tree):
    key = tree_key(tree)
    return min(brokers, key=lambda b: (ring_distance(key, node_id_from(b.pubend)), node_id_from(b.pubend)))


@pytest.fixture
def three(tmp_path):
    creator_auth = tmp_path / "creator.toml"
    owner = str(add_identity(creator_auth, "owner", [], ["#"], ["#"], FAST_KDF))
    viewer = str(add_identity(creator_auth, "viewer", [], [], [], FAST_KDF))
    loose_auth = tmp_path / "loose.toml"  # the same secret and identities, and viewer may subscribe
    shutil.copy(creator_auth, loose_auth)
    with loose_auth.open("a") as fh:
        fh.write(VIEWER_RULE)
    a = BrokerProcess(tmp_path / "a", args=["--auth", str(creator_auth)], credential=owner).start()
    others = [BrokerProcess(tmp_path / n, args=["--auth", str(loose_auth)], credential=owner, join=a.address)
              for n in ("one", "two")]
    try:
        for b in others:
            b.spawn()
        for b in others:
            b.wait_ready()
        brokers = [a, *others]
        wait_for(lambda: all(x.status()["overlay"]["joined"] and len(x.status()["overlay"]["leaf_set"]) == 2
                             for x in brokers), 20, what="three brokers in one overlay")
        # a tree whose rendez-vous point is not the creator's broker: that broker is R, the other B.
        # Node ids hash the brokers' ports, so a broker's share of the ring can be small: look far.
        tree = next(t for t in (f"t{i}/#" for i in range(1 << 20)) if root_of(brokers, t) is not a)
        r = root_of(brokers, tree)
        b = others[1] if r is others[0] else others[0]
        yield a, r, b, tree, creator_auth, owner, viewer
    finally:
        for x in (a, *others):
            x.stop()


def test_the_creators_list_at_the_rendezvous_point_decides_and_a_reload_changes_it(three):
    a, r, b, tree, creator_auth, owner, viewer = three
    channel = tree.replace("#", "x")
    with sync.connect(a.address, credential=owner) as owner_client, \
            sync.connect(b.address, credential=viewer) as viewer_client:
        owned = owner_client.subscribe(tree)
        wait_for(lambda: (tree_status(r, tree) or {}).get("acl_rules") == 1, 10, what="A's list at R")
        assert tree_status(r, tree)["creator"] == "owner" and "root" in tree_status(r, tree)["role"]

        refused = viewer_client.subscribe(tree)  # B's own rules allow it
        with pytest.raises(BrokerError) as err:
            refused.get(10)
        assert err.value.code == "forbidden" and "created by 'owner'" in str(err.value)
        wait_for(lambda: tree_status(b, tree) is None, 10, what="B out of the tree")
        owner_client.publish(channel, b"before viewer was let in")
        assert owned.get(10).payload == b"before viewer was let in"
        assert b.status()["auth"]["identities"]["viewer"]["refusals"] == 1

        with creator_auth.open("a") as fh:
            fh.write(VIEWER_RULE)
        a.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: tree_status(r, tree)["acl_rules"] == 2, 10, what="the reloaded list at R")
        served = viewer_client.subscribe(tree)
        wait_for(lambda: (tree_status(b, tree) or {}).get("parent"), 10, what="B in the tree")
        owner_client.publish(channel, b"now for viewer too")
        # a subscription "now" at another broker takes the clock-skew allowance back: the list is
        # checked when a subscription is made, so what it then reads was published before may come
        got = [served.get(10).payload]
        while got[-1] != b"now for viewer too":
            got.append(served.get(10).payload)
        assert got in ([b"now for viewer too"], [b"before viewer was let in", b"now for viewer too"])

        creator_auth.write_text(creator_auth.read_text().replace(VIEWER_RULE, ""))
        a.proc.send_signal(signal.SIGHUP)
        with pytest.raises(BrokerError) as err:
            served.get(10)
        assert err.value.code == "forbidden"
        assert owned.get(10).payload == b"now for viewer too"
        assert b.status()["auth"]["identities"]["viewer"]["refusals"] == 2
