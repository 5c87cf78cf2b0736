"""A cluster with a credential, in real processes: its brokers link up and deliver across the
overlay to authenticated clients; a broker with another cluster secret cannot join; and the peer
garbage of test_cluster_bad_input.py, sent by a process without the credential, gets no link and
reaches no layer (the layers' rejection counter stays at zero, and the stream goes on)."""

import subprocess
import sys
import time

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings

from tidings import sync
from tidings.aio.auth_file import add_identity
from tidings.core.auth.credentials import KdfParams
from tidings.core.wire import decoders, messages, peer
from tidings.testing import BrokerProcess, Cluster
from tidings.testing.broker_process import wait_for

from .test_cluster_bad_input import fake_node, garbage, link_messages, replies, wait_in_tree

pytestmark = pytest.mark.integration
FAST_KDF = KdfParams(n=1 << 10)
OBSERVE_S = 3.0


@pytest.fixture(scope="module")
def secured_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("secured-cluster")
    auth = root / "auth.toml"
    admin = str(add_identity(auth, "admin", [], ["#"], ["#"], FAST_KDF))
    with Cluster(root, 2, args=["--auth", str(auth)], credential=admin) as cluster, \
            sync.connect(cluster[1].address, credential=admin) as sub_client, \
            sync.connect(cluster[0].address, credential=admin) as pub_client:
        sub = sub_client.subscribe("steady/#")
        wait_in_tree(cluster, cluster[1], "steady/#")
        published = []

        def still_serving():
            published.append(pub_client.publish("steady/x", b"still here").tick)
            got = [sub.get(10).tick for _ in range(len(published) - len(still_serving.seen))]
            still_serving.seen += got
            assert still_serving.seen == published
            status = cluster.status(cluster[0])
            assert {p["address"]: p["state"] for p in status["peers"]} == {cluster[1].address: "open"}
            assert status["peer_messages_rejected"] == 0, "nothing unauthenticated reached a layer"

        still_serving.seen = []
        yield cluster, auth, root, still_serving


def test_the_cluster_delivers_across_brokers(secured_pair):
    secured_pair[3]()


def test_a_broker_with_another_cluster_secret_cannot_join(secured_pair):
    """The intruder tries to join for OBSERVE_S (absence needs a window): it is never joined,
    and no member ever lists it among its peers."""
    cluster, _, root, still_serving = secured_pair
    other = root / "other.toml"
    own = str(add_identity(other, "admin", [], ["#"], ["#"], FAST_KDF))  # a fresh file: another secret
    with BrokerProcess(root / "intruder", args=["--auth", str(other)], join=cluster[0].address,
                       credential=own) as intruder:
        deadline = time.monotonic() + OBSERVE_S
        while time.monotonic() < deadline:
            assert not intruder.status()["overlay"]["joined"]
            for b in cluster.brokers:
                assert intruder.address not in {p["address"] for p in cluster.status(b)["peers"]}
            time.sleep(0.2)  # pacing the observation, not waiting for an event
        assert intruder.running
    still_serving()


def test_peer_hellos_without_the_credential_get_no_link(secured_pair):
    cluster, _, _, still_serving = secured_pair
    msgs = link_messages(replies(cluster[0].address, peer.hello(fake_node()) + peer.encode([96, "heartbeat"])))
    assert msgs == [peer.PeerError("auth-failed", msgs[0].message)]
    msgs = link_messages(replies(cluster[0].address, peer.hello(fake_node(), nonce=b"n" * 24)
                                 + peer.auth(b"\x00" * 32) + peer.encode([64, "join"])))
    assert isinstance(msgs[0], peer.PeerChallenge)
    assert msgs[1:] == [peer.PeerError("auth-failed", "wrong cluster credential")]
    still_serving()


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=garbage)
def test_the_peer_fuzz_without_the_credential_is_never_acted_on(secured_pair, data):
    cluster = secured_pair[0]
    for nonce in (None, b"n" * 24):
        for msg in link_messages(replies(cluster[0].address, peer.hello(fake_node(), nonce=nonce) + data)):
            assert isinstance(msg, peer.PeerChallenge | peer.PeerError)
    status = cluster.status(cluster[0])
    assert status["peer_messages_rejected"] == 0
    assert {p["address"] for p in status["peers"]} == {cluster[1].address}


def test_client_messages_on_a_secured_cluster_need_a_credential_too(secured_pair):
    cluster = secured_pair[0]
    (body,) = replies(cluster[0].address, messages.hello("x", "y") + msgpack.packb([1]))
    err = decoders.decode_broker_message(body)
    assert isinstance(err, messages.Error) and err.code == "auth-required"


def test_the_cli_sees_the_cluster_with_a_credential(secured_pair):
    cluster, auth, _, _ = secured_pair
    cred = str(add_identity(auth, "ops", [], [], [], FAST_KDF))
    subprocess.run([sys.executable, "-m", "tidings.cli.main", "status", "--broker", cluster[0].address],
                   check=False, capture_output=True, timeout=60)  # before the reload: refused
    for b in cluster.brokers:
        b.proc.send_signal(1)  # SIGHUP: the new identity is known
    def ok():
        out = subprocess.run([sys.executable, "-m", "tidings.cli.main", "status", "--json", "--broker",
                              cluster[0].address, "--credential", cred], check=False, capture_output=True,
                             text=True, timeout=60)
        return out.returncode == 0 and '"identities"' in out.stdout
    cluster.wait(ok, 20, what="status with the new credential")


def join_once(data, join, args, timeout_s=4):
    """`tidings broker --join` with a short --join-timeout: it stops and says why it could not join."""
    return subprocess.run([sys.executable, "-m", "tidings.cli.main", "broker", "--data", str(data), "--listen",
                           "127.0.0.1:0", "--join", join, "--join-timeout", str(timeout_s), *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_a_refused_broker_is_told_why_and_the_member_logs_and_counts_it(tmp_path):
    """A broker without the cluster credential, and one with another secret, try to join a member:
    each stops naming what is wrong; the member counts each refusal by reason (in /status and
    /metrics) and logs them with the remote address, at most once a second per host, saying how
    many it held back."""
    auth, other = tmp_path / "auth.toml", tmp_path / "other.toml"
    admin = str(add_identity(auth, "admin", [], ["#"], ["#"], FAST_KDF))
    add_identity(other, "admin", [], ["#"], ["#"], FAST_KDF)
    log = tmp_path / "member.log"
    with BrokerProcess(tmp_path / "member", args=["--auth", str(auth)], credential=admin, http=True,
                       log=log) as member:
        bare = join_once(tmp_path / "bare", member.address, [])
        assert bare.returncode != 0
        assert f"{member.address} requires a cluster credential" in bare.stderr, bare.stderr
        wrong = join_once(tmp_path / "wrong", member.address, ["--auth", str(other)])
        assert wrong.returncode != 0
        assert f"{member.address} holds another cluster credential" in wrong.stderr, wrong.stderr

        refused = member.status()["peer_refusals"]["acceptor"]
        assert refused["missing-credential"] >= 1 and refused["bad-proof"] >= 1
        burst = 30  # bare PEER_HELLOs as fast as they go: counted each, logged about once a second
        began = time.monotonic()
        for _ in range(burst):
            (body,) = replies(member.address, peer.hello(fake_node()))
            assert link_messages([body]) == [peer.PeerError("auth-failed", link_messages([body])[0].message)]
        seconds = time.monotonic() - began
        after = member.status()["peer_refusals"]["acceptor"]
        assert after["missing-credential"] == refused["missing-credential"] + burst

        from .test_http import scrape
        m = scrape(member.http_address)
        assert m[("tidings_peer_refusals_total", (("reason", "missing-credential"), ("side", "acceptor")))] \
            == after["missing-credential"]
        assert m[("tidings_peer_refusals_total", (("reason", "bad-proof"), ("side", "acceptor")))] == after["bad-proof"]

        def lines():
            return [ln for ln in log.read_text().splitlines() if "refused a peer link from 127.0.0.1:" in ln]
        wait_for(lambda: any("held back" in ln for ln in lines()), 10, what="a log line saying what it held back")
        text = lines()
        assert any("(missing-credential)" in ln and "requires its credential" in ln for ln in text)
        assert any("(bad-proof)" in ln and "secrets differ" in ln for ln in text)
        assert len([ln for ln in text if "announcing '127.0.0." in ln and ":9'" in ln]) <= seconds + 2
