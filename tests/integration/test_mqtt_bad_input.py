"""Garbage on a broker's MQTT port (issue 23): each bad stream is answered as its MQTT version
requires (a 5.0 DISCONNECT with the reason code, a CONNACK refusal, or a close) and the broker
serves everyone else on, MQTT and native clients alike."""

import socket

import pytest

from tidings import sync
from tidings.core.mqtt import packets as p
from tidings.core.mqtt.codec import PacketDecoder
from tidings.core.mqtt.encode import encode
from tidings.testing import BrokerProcess

from .mqtt_io import V5, V311, Mqtt
from .wire_io import exchange

pytestmark = pytest.mark.integration

CONNECT_5 = encode(p.Connect(5, "garbage-5"), 5)
CONNECT_311 = encode(p.Connect(4, "garbage-311"), 4)


@pytest.fixture(scope="module")
def mqtt_broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("mqtt-bad") / "broker", args=["--mqtt", "127.0.0.1:0"]) as proc:
        yield proc


def answers(data: bytes, version: int) -> list:
    decoder = PacketDecoder(1 << 20, version)
    return decoder.feed(data)


@pytest.mark.parametrize("garbage", [
    b"\x00\x00\x00\x00",  # packet type 0
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    b"\x10\xff\xff\xff\xff\x01",  # a remaining length of five bytes
    b"\x30\x02\x00\x00",  # PUBLISH before CONNECT
    bytes(range(256)) * 4,
])
def test_garbage_before_connect_is_closed(mqtt_broker, garbage):
    assert answers(exchange(mqtt_broker.mqtt_address, garbage), 5) == []  # nothing to say to it but the close


def connected_then(address: str, connect: bytes, garbage: bytes, version: int) -> list:
    """CONNECT, its CONNACK read, then `garbage`: every packet the broker answered until it closed."""
    host, port = address.rsplit(":", 1)
    decoder = PacketDecoder(1 << 20, version)
    got: list = []
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(connect)
        while not got:
            chunk = s.recv(65536)
            assert chunk, "closed before CONNACK"
            got += decoder.feed(chunk)
        s.sendall(garbage)
        while chunk := s.recv(65536):
            got += decoder.feed(chunk)
    return got


def test_a_bad_packet_after_connack_gets_disconnect_with_its_reason_code_in_5(mqtt_broker):
    got = connected_then(mqtt_broker.mqtt_address, CONNECT_5, b"\x82\x03\x00\x01\x00", 5)  # SUBSCRIBE, no topic
    assert [type(x) for x in got] == [p.Connack, p.Disconnect]
    assert got[0].reason_code == 0 and got[1].reason_code == 0x82  # no filter: a protocol error (3.8.3)


def test_a_bad_packet_right_behind_the_connect_is_judged_once_the_connection_is_accepted(mqtt_broker):
    got = answers(exchange(mqtt_broker.mqtt_address, CONNECT_5 + b"\x82\x03\x00\x01\x00"), 5)
    assert [(type(x), x.reason_code) for x in got] == [(p.Connack, 0), (p.Disconnect, 0x82)]


def test_a_malformed_packet_after_connack_closes_a_3_1_1_connection(mqtt_broker):
    got = connected_then(mqtt_broker.mqtt_address, CONNECT_311, b"\x82\x03\x00\x01\x00", 4)
    assert [(type(x), x.reason_code) for x in got] == [(p.Connack, 0)]


def test_an_unsupported_protocol_level_is_refused_in_the_connack(mqtt_broker):
    connect = bytearray(CONNECT_311)
    connect[8] = 3  # MQTT 3.1's level (the byte after the protocol name "MQTT")
    got = answers(exchange(mqtt_broker.mqtt_address, bytes(connect)), 4)
    assert [x.reason_code for x in got] == [1]  # 3.1.1's "unacceptable protocol version"


def test_native_frames_on_the_mqtt_port_and_mqtt_on_the_native_port_are_refused(mqtt_broker):
    with sync.connect(mqtt_broker.address, service="probe"):
        pass
    host, port = mqtt_broker.mqtt_address.rsplit(":", 1)
    with pytest.raises(Exception):  # noqa: B017 - whatever the client library says: not a broker
        sync.connect(mqtt_broker.mqtt_address, service="lost", timeout=3)
    reply = exchange(mqtt_broker.address, CONNECT_5)
    assert b"frame-too-large" in reply  # the native port's ERROR: an MQTT CONNECT is no frame of tidings
    with socket.create_connection((host, int(port)), timeout=5):
        pass  # the MQTT port still accepts


@pytest.mark.parametrize("version", [V311, V5])
def test_the_broker_serves_everyone_else_after_the_garbage(mqtt_broker, version):
    for garbage in (b"\x00" * 64, CONNECT_5 + b"\xf0\x00", b"\x10\x7f" + b"\x00" * 10):
        exchange(mqtt_broker.mqtt_address, garbage)
    sub = Mqtt(mqtt_broker.mqtt_address, f"after-{version}", version)
    try:
        assert sub.subscribe("after/#") == [1]
        with sync.connect(mqtt_broker.address, service="native") as native:
            native.publish("after/x", b"still here")
        msg = sub.get()
        assert (msg.topic, msg.payload) == ("after/x", b"still here")
    finally:
        sub.close()
