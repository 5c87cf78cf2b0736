"""Enhanced authentication (MQTT 5.0's AUTH and Authentication Method, 4.12) is refused as the spec
says, packet by packet with a raw client of our codec on a real broker: a CONNECT with an
Authentication Method the broker does not support gets CONNACK 0x8C and the close (4.12.0-1); an
AUTH from a client that connected without one is a Protocol Error, DISCONNECT 0x82 (3.15, 4.13); an
AUTH before CONNECT, or in 3.1.1 (packet type 15 is reserved there), is closed unanswered; and the
broker serves everyone else meanwhile."""

import pytest

from tidings.core.mqtt import packets as p
from tidings.core.mqtt.encode import encode
from tidings.core.mqtt.properties import Properties
from tidings.testing import BrokerProcess

from .mqtt_raw import Raw

pytestmark = pytest.mark.integration

AUTH_CONTINUE = 0x18


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("auth") / "b", args=["--mqtt", "127.0.0.1:0"]).start()
    yield b
    b.stop()


def still_serving(broker: BrokerProcess) -> None:
    c = Raw(broker.mqtt_address, 5, "bystander")
    c.send(p.Pingreq())
    assert c.expect(1) == [p.Pingresp()]
    c.close()


@pytest.mark.parametrize("data", [None, b"\x00client-first"])
def test_a_connect_with_an_authentication_method_gets_connack_0x8c(broker, data):
    c = Raw(broker.mqtt_address, 5, "", connect=False)
    props = Properties(authentication_method="SCRAM-SHA-256", authentication_data=data)
    c.send(p.Connect(5, "am", True, 30, properties=props))
    [connack] = c.expect(1)
    assert isinstance(connack, p.Connack) and connack.reason_code == 0x8C and not connack.session_present
    assert c.closed()
    still_serving(broker)


def test_authentication_data_without_a_method_is_a_protocol_error(broker):
    c = Raw(broker.mqtt_address, 5, "", connect=False)
    c.send(p.Connect(5, "ad", True, 30, properties=Properties(authentication_data=b"x")))
    [connack] = c.expect(1)
    assert isinstance(connack, p.Connack) and connack.reason_code in (0x81, 0x82)  # 3.1.2.11.10
    assert c.closed()


@pytest.mark.parametrize("reason", [AUTH_CONTINUE, 0x19, 0x00])
def test_an_auth_after_a_connect_without_a_method_gets_disconnect_0x82(broker, reason):
    c = Raw(broker.mqtt_address, 5, f"auth-{reason}")
    c.send(p.Auth(reason, Properties(authentication_method="SCRAM-SHA-256") if reason else Properties()))
    [disconnect] = c.expect(1)
    assert isinstance(disconnect, p.Disconnect) and disconnect.reason_code == 0x82
    assert c.closed()
    still_serving(broker)


def test_an_auth_before_connect_is_closed_unanswered(broker):
    c = Raw(broker.mqtt_address, 5, "", connect=False)
    c.send(p.Auth(AUTH_CONTINUE, Properties(authentication_method="SCRAM-SHA-256")))
    assert c.closed()
    still_serving(broker)


def test_packet_type_15_in_3_1_1_is_malformed_and_closed(broker):
    c = Raw(broker.mqtt_address, 4, "old-auth")
    c.sock.sendall(bytes([0xF0, 0x00]))  # (AUTH's type, which 3.1.1 reserves: our encoder will not write it)
    assert c.closed()
    still_serving(broker)
    assert encode(p.Auth(0), 5) == bytes([0xF0, 0x00])  # (the same bytes are 5.0's shortest AUTH)
