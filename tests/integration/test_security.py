"""Authenticated clients against a real broker process with an auth file: the source stamped on
events is the authenticated identity, wrong and replayed credentials are refused, rules refuse
publishes and subscriptions outside them (and nothing is logged), SIGHUP reloads the rules, and a
broker off loopback refuses to start without --auth or --allow-anonymous."""

import contextlib
import json
import signal
import socket
import subprocess
import sys
import threading

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings import sync
from tidings.aio.auth_file import add_identity
from tidings.core.auth.credentials import KdfParams, parse_credential
from tidings.core.errors import BrokerError, BrokerNotProven, TidingsError
from tidings.core.wire import decoders, messages
from tidings.core.wire.frames import FrameDecoder, frame
from tidings.core.wire.types import ClientType
from tidings.testing import BrokerProcess
from tidings.testing.broker_process import wait_for

from .wire_io import exchange

pytestmark = pytest.mark.integration
FAST_KDF = KdfParams(n=1 << 10)  # the tests' verifiers: cheap scrypt, same protocol


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    root = tmp_path_factory.mktemp("secured")
    auth = root / "auth.toml"
    creds = {
        "loadmon": add_identity(auth, "loadmon", ["host*"], ["load/#"], ["load/#"], FAST_KDF),
        "viewer": add_identity(auth, "viewer", [], [], ["load/#"], FAST_KDF),
        "admin": add_identity(auth, "admin", [], [], ["#"], FAST_KDF),
    }
    with BrokerProcess(root / "broker", args=["--auth", str(auth)], credential=str(creds["admin"])) as broker:
        yield broker, {k: str(v) for k, v in creds.items()}, auth


def test_the_source_is_the_authenticated_identity(secured):
    broker, creds, _ = secured
    with sync.connect(broker.address, credential=creds["viewer"]) as viewer, \
            viewer.subscribe("load/#") as sub, \
            sync.connect(broker.address, service="forged", instance="host-7", credential=creds["loadmon"]) as pub:
        res = pub.publish("load/h1", b"2.3")
        event = sub.get(10)
    assert (event.tick, event.service, event.instance) == (res.tick, "loadmon", "host-7")


def test_without_a_credential_the_broker_refuses(secured):
    broker, _, _ = secured
    with pytest.raises(BrokerError) as err:
        sync.connect(broker.address, service="loadmon")
    assert err.value.code == "auth-required"


@pytest.mark.parametrize("which", ["wrong secret", "unknown name", "instance not allowed"])
def test_wrong_credentials_are_refused(secured, which):
    broker, creds, _ = secured
    good = parse_credential(creds["loadmon"])
    credential, instance = {
        "wrong secret": (f"loadmon:{'A' * 43}", "host-1"),
        "unknown name": (f"nobody:{str(good).split(':')[1]}", "host-1"),
        "instance not allowed": (creds["loadmon"], "elsewhere"),
    }[which]
    with pytest.raises(TidingsError) as err:
        sync.connect(broker.address, instance=instance, credential=credential)
    assert err.value.code == "auth-failed"


def test_a_replayed_proof_fails(secured):
    """Record a whole successful handshake's bytes, play them again on a new connection."""
    broker, creds, _ = secured
    from tidings.core.session.client_session import ClientSession

    session = ClientSession("x", "host-1", parse_credential(creds["loadmon"]), b"n" * 24)
    import socket

    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        sock.sendall(session.hello())
        decoder = FrameDecoder(1 << 20)
        challenge = decoders.decode_broker_message(wait_for(lambda: decoder.feed(sock.recv(65536)), 10)[0])
        proof = session.answer(challenge)
        sock.sendall(proof)
        welcome = decoders.decode_broker_message(wait_for(lambda: decoder.feed(sock.recv(65536)), 10)[0])
        assert isinstance(welcome, messages.Welcome) and welcome.info["identity"] == "loadmon"
    bodies = FrameDecoder(1 << 20).feed(exchange(broker.address, session.hello() + proof, timeout=10.0))
    replies = [decoders.decode_broker_message(b) for b in bodies]
    assert isinstance(replies[0], messages.Challenge) and replies[0].nonce != challenge.nonce
    assert isinstance(replies[-1], messages.Error) and replies[-1].code == "auth-failed"


def test_rules_refuse_publish_and_subscribe_and_nothing_is_logged(secured):
    broker, creds, _ = secured
    before = broker.status()["events_published"]
    with sync.connect(broker.address, instance="host-1", credential=creds["loadmon"]) as pub:
        with pytest.raises(BrokerError) as err:
            pub.publish("secret/x", b"no")
        assert err.value.code == "forbidden" and "may not publish" in str(err.value)
        with pytest.raises(BrokerError) as err:
            pub.subscribe("#")
        assert err.value.code == "forbidden"
    with sync.connect(broker.address, credential=creds["viewer"]) as viewer, pytest.raises(BrokerError):
        viewer.publish("load/h1", b"viewers only read")
    status = broker.status()
    assert status["events_published"] == before
    assert status["auth"]["identities"]["loadmon"]["refusals"] >= 2
    assert status["auth"]["identities"]["admin"]["connections"] == 1  # the status call itself


def test_only_a_reader_of_every_channel_is_sent_the_logs_own_bytes(secured):
    """A READ's SPAN frames carry every channel's records: `viewer` (load/# only) gets RECORDS."""
    broker, creds, _ = secured
    with sync.connect(broker.address, service="loadmon", instance="host-1", credential=creds["loadmon"]) as pub:
        for start in range(0, 12_000, 2000):
            pub.publish_many([("load/h1", b"x" * 100, {"i": i}) for i in range(start, start + 2000)])
        end = pub.status()["last_tick"]
    kinds = {}
    for who in ("viewer", "admin"):
        with sync.connect(broker.address, credential=creds[who], follow_advice=False) as reader:
            kinds[who] = {type(item) for item in reader.read_records("load/#", after=0, end=end, spans=True)}
    assert kinds == {"viewer": {messages.Records}, "admin": {messages.Records, messages.Span}}


def test_sighup_reloads_the_rules(tmp_path):
    auth = tmp_path / "auth.toml"
    cred = str(add_identity(auth, "svc", [], ["a/#"], [], FAST_KDF))
    with BrokerProcess(tmp_path / "b", args=["--auth", str(auth)], credential=cred) as broker, \
            sync.connect(broker.address, credential=cred) as client:
        client.publish("a/1", b"ok")
        with pytest.raises(BrokerError):
            client.publish("b/1", b"not yet")
        with auth.open("a") as fh:
            fh.write('\n[[rules]]\nidentity = "svc"\nallow = "publish"\npattern = "b/#"\n')
        broker.proc.send_signal(signal.SIGHUP)

        def allowed():
            try:
                return client.publish("b/1", b"now")
            except BrokerError:
                return None
        wait_for(allowed, 10, what="the reloaded rule")


def test_off_loopback_a_broker_needs_auth_or_allow_anonymous(tmp_path):
    cmd = [sys.executable, "-m", "tidings.cli.main", "broker", "--data", str(tmp_path), "--listen", "0.0.0.0:0"]
    out = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    errors = [line for line in out.stderr.splitlines() if line.startswith("tidings: error:")]
    assert errors == ["tidings: error: --listen 0.0.0.0 is not loopback: give --auth FILE (tidings auth add) or "
                      "--allow-anonymous to let anyone in"]


def test_auth_add_prints_the_credential_once_and_stores_a_verifier(tmp_path):
    path = tmp_path / "a.toml"
    cmd = [sys.executable, "-m", "tidings.cli.main", "auth", "add", "svc", "--file", str(path), "--publish", "x/#"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True)
    credential = json.loads(out.stdout)["credential"]
    secret = credential.split(":")[1]
    assert credential.startswith("svc:") and secret not in path.read_text()
    assert path.stat().st_mode & 0o777 == 0o600
    again = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "already exists" in again.stderr


garbage_after_hello = st.one_of(
    st.binary(max_size=300),
    st.builds(frame, st.binary(max_size=100)),
    st.builds(lambda body: frame(msgpack.packb(body)),
              st.lists(st.integers(0, 300) | st.binary(max_size=40) | st.text(max_size=10) | st.none(),
                       min_size=1, max_size=4)),
)


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=garbage_after_hello)
def test_garbage_in_the_middle_of_the_handshake(secured, data):
    """After a HELLO with a nonce: a CHALLENGE, then at most errors; never a WELCOME, and the
    broker serves on."""
    broker = secured[0]
    hello = messages.hello("loadmon", "host-1", nonce=b"n" * 24)
    bodies = FrameDecoder(1 << 20).feed(exchange(broker.address, hello + data, timeout=10.0))
    replies = [decoders.decode_broker_message(b) for b in bodies]
    assert isinstance(replies[0], messages.Challenge)
    assert all(isinstance(r, messages.Error) for r in replies[1:])
    assert broker.running


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """A broker with an auth file (one identity, no rules) that also lets anonymous clients in."""
    root = tmp_path_factory.mktemp("mixed")
    auth = root / "auth.toml"
    cred = str(add_identity(auth, "loadmon", [], [], [], FAST_KDF))
    with BrokerProcess(root / "broker", args=["--auth", str(auth), "--allow-anonymous"], credential=cred) as broker:
        yield broker, cred


THE_ISSUES_LOOK_ALIKES = {  # as an anonymous client's service, beside the identity `loadmon`
    "LoadMon": ("auth-required", "reads as the registered identity 'loadmon'"),
    "loadmon ": ("bad-name", "a space (U+0020) at index 7"),
    "l\u043eadmon": ("bad-name", "outside ASCII (U+043E CYRILLIC SMALL LETTER O)"),
    "load\u200bmon": ("bad-name", "an invisible format character (U+200B ZERO WIDTH SPACE)"),
    "anonymous": ("auth-required", "reads as 'anonymous'"),
}


@pytest.mark.parametrize("claim", sorted(THE_ISSUES_LOOK_ALIKES))
def test_look_alikes_of_an_identity_are_refused_to_anonymous_clients(mixed, claim):
    broker, _ = mixed
    code, message = THE_ISSUES_LOOK_ALIKES[claim]
    with pytest.raises(BrokerError) as err:
        sync.connect(broker.address, service=claim)
    assert err.value.code == code and message in str(err.value)
    out = subprocess.run([sys.executable, "-m", "tidings.cli.main", "pub", "--broker", broker.address,
                          "--service", claim, "load/h1", "x"], check=False, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and message in out.stderr
    with sync.connect(broker.address, service="loadmon2") as other:  # a name of no one's is let in
        assert other.status()["auth"]["anonymous_allowed"]


def test_events_say_whether_their_source_authenticated(mixed):
    broker, cred = mixed
    with sync.connect(broker.address, service="watcher") as watcher, watcher.subscribe("flag/#") as sub:
        with sync.connect(broker.address, service="visitor") as anonymous:
            first = anonymous.publish("flag/a", b"anonymous")
        with sync.connect(broker.address, credential=cred) as proved:
            second = proved.publish("flag/a", b"proved")
        events = [sub.get(10), sub.get(10)]
    assert [(e.tick, e.service, e.authenticated) for e in events] == [
        (first.tick, "visitor", False), (second.tick, "loadmon", True)]
    out = subprocess.run([sys.executable, "-m", "tidings.cli.main", "sub", "--broker", broker.address, "flag/#",
                          "--from", "start", "--count", "2", "--timeout", "20"],
                         check=False, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    sources = [json.loads(line)["source"] for line in out.stdout.splitlines()]
    assert [(s["service"], s["authenticated"]) for s in sources] == [("visitor", False), ("loadmon", True)]
class TamperingProxy:
    """Between a client and the broker, on loopback: passes every byte, except that it flips one
    bit of the server signature in the broker's WELCOME, as an attacker on the path could."""

    def __init__(self, broker_address):
        self.broker = broker_address
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.tampered = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        with contextlib.suppress(OSError):  # closed by close()
            while True:
                client, _ = self.listener.accept()
                host, port = self.broker.rsplit(":", 1)
                upstream = socket.create_connection((host, int(port)), timeout=10)
                threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
                threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, src, dst, from_broker):
        decoder = FrameDecoder(1 << 20)
        with contextlib.suppress(OSError), src, dst:
            while chunk := src.recv(65536):
                if not from_broker:
                    dst.sendall(chunk)
                    continue
                for body in decoder.feed(chunk):
                    msg = msgpack.unpackb(body)
                    if msg[0] == ClientType.WELCOME and "server_signature" in msg[2]:
                        signature = bytearray(msg[2]["server_signature"])
                        signature[0] ^= 1
                        msg[2]["server_signature"] = bytes(signature)
                        self.tampered.set()
                    dst.sendall(frame(msgpack.packb(msg)))

    def close(self):
        self.listener.close()


def test_a_tampered_server_signature_is_named_as_such(secured):
    broker, creds, _ = secured
    proxy = TamperingProxy(broker.address)
    try:
        with pytest.raises(BrokerNotProven, match="WELCOME signature does not verify") as err:
            sync.connect(proxy.address, credential=creds["viewer"], timeout=10)
        assert proxy.tampered.is_set() and err.value.code == "auth-failed"
        assert "not a tidings broker" not in str(err.value)
        out = subprocess.run([sys.executable, "-m", "tidings.cli.main", "status", "--broker", proxy.address,
                              "--credential", creds["viewer"]], capture_output=True, text=True, timeout=60,
                             check=False)
        assert out.returncode == 1, out.stderr  # not 3 (unreachable): a broker answered, and failed the check
        assert "did not prove it knows identity 'viewer'" in out.stderr and "tampered" in out.stderr
        assert f"refused {proxy.address}" in out.stderr
    finally:
        proxy.close()
    with sync.connect(broker.address, credential=creds["viewer"]) as direct:  # the broker itself is fine
        assert direct.status()["pubend"] == broker.pubend
