"""QoS 2 through a kill -9, packet by packet (issue 23; core/mqtt/exactly_once.py): a client of our
own codec on a socket, 3.1.1 and 5.0, in a persistent session, holds QoS 2 flows in every state the
spec has when its broker is killed -9 (PUBREC received and PUBREL not sent, PUBREL sent and PUBCOMP
not received, completed), then reconnects to the restarted broker: a PUBLISH retried with DUP under a
logged identifier gets its PUBREC and is not logged again, a PUBREL gets PUBCOMP, and an identifier
released before the kill carries a new message."""

import pytest

from tidings import sync
from tidings.core.mqtt import packets as p
from tidings.testing import BrokerProcess, wait_for

from .mqtt_raw import WAIT_S, Raw, qos2_held, qos2_resumed

pytestmark = pytest.mark.integration

@pytest.mark.parametrize("version", [4, 5])
def test_every_qos2_state_through_kill_9(tmp_path, version):
    broker = BrokerProcess(tmp_path / "b", args=["--mqtt", "127.0.0.1:0"]).start()
    try:
        c = Raw(broker.mqtt_address, version, "raw-q2")
        c.send(*(p.Publish("q2/raw", f"m{pid}".encode(), 2, packet_id=pid) for pid in range(1, 10)))
        assert sorted(x.packet_id for x in c.expect(9)) == list(range(1, 10))  # PUBREC each: logged
        c.send(*(p.Pubrel(pid) for pid in (1, 2, 3, 4, 5, 6)))
        assert c.expect(6) == [p.Pubcomp(pid) for pid in (1, 2, 3, 4, 5, 6)]  # 1-6 completed; 7-9 open
        c.send(p.Pubrel(7))  # its PUBCOMP may or may not come before the kill
        broker.kill()
        c.close()
        broker.start()
        c = Raw(broker.mqtt_address, version, "raw-q2")
        # 8 and 9: as if their PUBRECs were lost in the kill; 7: PUBREL again; 1-3: new messages
        c.send(p.Publish("q2/raw", b"m8", 2, True, packet_id=8), p.Publish("q2/raw", b"m9", 2, True, packet_id=9))
        assert c.expect(2) == [p.Pubrec(8), p.Pubrec(9)]
        c.send(p.Pubrel(7), p.Pubrel(8), p.Pubrel(9))
        done = c.expect(3)
        assert done[1:] == [p.Pubcomp(8), p.Pubcomp(9)]
        assert isinstance(done[0], p.Pubcomp) and done[0].packet_id == 7  # 0x00, or 0x92 if its release was saved
        c.send(*(p.Publish("q2/raw", f"new{pid}".encode(), 2, packet_id=pid) for pid in (1, 2, 3)))
        assert sorted(x.packet_id for x in c.expect(3)) == [1, 2, 3]
        c.close()
        with sync.connect(broker.address, service="reader") as reader:
            reader.publish("q2/raw", b"end")
            with reader.subscribe("q2/#", start="start") as sub:
                logged: list[bytes] = []
                while not logged or logged[-1] != b"end":
                    logged.append(sub.get(WAIT_S).payload)
        assert logged[:-1] == [f"m{pid}".encode() for pid in range(1, 10)] + [b"new1", b"new2", b"new3"]
    finally:
        broker.stop()


@pytest.mark.parametrize("version", [4, 5])
def test_a_persistent_subscribers_qos2_flows_resume_under_their_packet_ids(tmp_path, version):
    """A persistent session granted QoS 2 holds one delivery past PUBREC and one unanswered when its
    connection drops; on its reconnect the broker resends PUBREL and PUBLISH with DUP under the same
    packet identifiers (4.4), and sends neither message again."""
    broker = BrokerProcess(tmp_path / "b", args=["--mqtt", "127.0.0.1:0"]).start()
    try:
        sub, pub, a, b = qos2_held(broker, version, "rs")
        sub.close()
        wait_for(lambda: broker.status()["mqtt"]["connections"] == 1, 15, what="the broker seeing the drop")
        qos2_resumed(broker, version, "rs", a, b)
        pub.close()
    finally:
        broker.stop()


@pytest.mark.parametrize("version", [4, 5])
def test_a_takeover_resumes_the_open_connections_flows_under_their_packet_ids(tmp_path, version):
    """The same persistent session, its connection still open, taken over by a new connection with
    the same client id: the old one is closed (5.0: DISCONNECT 0x8E), and the new one gets what the
    old one had in flight as a reconnect would (4.4): PUBREL and PUBLISH with DUP under their packet
    identifiers, neither message again as a new one."""
    broker = BrokerProcess(tmp_path / "b", args=["--mqtt", "127.0.0.1:0"]).start()
    try:
        old, pub, a, b = qos2_held(broker, version, "tk")
        qos2_resumed(broker, version, "tk", a, b)
        if version == 5:
            [bye] = old.expect(1)
            assert isinstance(bye, p.Disconnect) and bye.reason_code == 0x8E
        assert old.closed()
        old.close()
        pub.close()
    finally:
        broker.stop()
