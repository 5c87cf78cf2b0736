"""MQTT clients against a broker with an auth file (issue 23): the user name and password are an
identity's name and secret, checked as a native client's credential is (its events carry the
identity as source, authenticated); bad credentials get the CONNACK each version has for them; the
identity's rules refuse a SUBSCRIBE (0x87 in 5.0, 0x80 in 3.1.1) and a PUBLISH (PUBACK 0x87 in 5.0,
the connection closed in 3.1.1) outside them, and nothing refused is logged. A password travels
over TLS (`--mqtt-tls`, the broker's certificate) or from loopback only (tests/unit/test_mqtt_gateway.py
holds the refusal off loopback)."""

import pytest

from tidings import sync
from tidings.aio.auth_file import add_identity
from tidings.aio.tls import client_context, make_dev_certs
from tidings.core.auth.credentials import KdfParams, b64, parse_credential
from tidings.testing import BrokerProcess

from .mqtt_io import V5, V311, Mqtt

pytestmark = pytest.mark.integration
FAST_KDF = KdfParams(n=1 << 10)  # cheap scrypt, same protocol


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    root = tmp_path_factory.mktemp("mqtt-secured")
    auth = root / "auth.toml"
    creds = {
        "sensor": add_identity(auth, "sensor", ["dev-*"], ["sensors/#"], ["sensors/#"], FAST_KDF),
        "viewer": add_identity(auth, "viewer", ["*"], [], ["sensors/#"], FAST_KDF),
    }
    certs = make_dev_certs(root / "certs", ["127.0.0.1"])
    args = ["--auth", str(auth), "--mqtt", "127.0.0.1:0", "--mqtt-tls", "127.0.0.1:0",
            "--tls-cert", str(certs["cert_pem"]), "--tls-key", str(certs["cert_key"])]
    with BrokerProcess(root / "broker", args=args, credential=str(creds["viewer"]),
                       tls=client_context(certs["ca_pem"])) as broker:
        yield broker, {k: str(v) for k, v in creds.items()}, certs


def secret(credential: str) -> str:
    return b64(parse_credential(credential).secret)


@pytest.mark.parametrize("version", [V311, V5])
def test_an_identity_publishes_under_its_name(secured, version):
    broker, creds, certs = secured
    with sync.connect(broker.address, credential=creds["viewer"], tls=client_context(certs["ca_pem"])) as native, \
            native.subscribe("sensors/#") as sub:
        pub = Mqtt(broker.mqtt_address, f"dev-{version}", version, "sensor", secret(creds["sensor"]))
        try:
            assert pub.publish("sensors/t", b"20", qos=1) == 0
        finally:
            pub.close()
        event = sub.get(15)
    assert (event.service, event.instance, event.authenticated) == ("sensor", f"dev-{version}", True)


def test_a_password_over_tls_as_the_whole_credential(secured):
    broker, creds, certs = secured
    client = Mqtt(broker.mqtt_tls_address, "dev-tls", V5, "sensor", creds["sensor"], tls_ca=str(certs["ca_pem"]))
    try:
        assert client.publish("sensors/tls", b"1", qos=1) == 0
    finally:
        client.close()


@pytest.mark.parametrize("version", [V311, V5])
@pytest.mark.parametrize(("username", "password", "code"), [
    ("sensor", "A" * 43, 0x86),  # wrong secret
    ("nobody", None, 0x87),  # no password: anonymous, and this broker lets no one in anonymously
    (None, None, 0x87),
])
def test_bad_credentials_are_refused(secured, version, username, password, code):
    broker, _, _ = secured
    client = Mqtt(broker.mqtt_address, "dev-1", version, username, password, expect_refusal=True)
    client.close()
    assert client.code == code


@pytest.mark.parametrize(("version", "refused"), [(V311, 0x80), (V5, 0x87)])
def test_a_subscribe_outside_the_rules_is_refused(secured, version, refused):
    broker, creds, _ = secured
    client = Mqtt(broker.mqtt_address, f"viewer-{version}", version, "viewer", secret(creds["viewer"]))
    try:
        assert client.subscribe("secrets/#") == [refused]
        assert client.subscribe("sensors/#") == [1]  # the connection serves on
    finally:
        client.close()


def test_a_publish_outside_the_rules_is_refused_and_not_logged(secured):
    broker, creds, _ = secured
    before = broker.status()["events_published"]
    client = Mqtt(broker.mqtt_address, "viewer-5", V5, "viewer", secret(creds["viewer"]))
    try:
        assert client.publish("sensors/x", b"no", qos=1) == 0x87
    finally:
        client.close()
    old = Mqtt(broker.mqtt_address, "viewer-311", V311, "viewer", secret(creds["viewer"]))
    old.publish("sensors/x", b"no", qos=1, wait=False)
    old._wait(lambda: old.disconnect_code is not None, "the close")  # 3.1.1 has no other word for no
    old.close()
    assert broker.status()["events_published"] == before
