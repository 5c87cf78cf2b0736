"""Every kind of client refusal is visible to an operator: a real broker counts it under its reason
in `tidings_client_errors_total{reason}` (/metrics) and `client_errors` (/status), and logs it,
rate-limited, with the client's remote address (core/broker/refusals.py)."""

from __future__ import annotations

import json
import os
import re
import socket
import struct
import time
import urllib.request
from pathlib import Path

import msgpack
import pytest

from tidings import sync
from tidings.aio.auth_file import add_identity
from tidings.core.auth.credentials import NONCE_BYTES, Credential, KdfParams
from tidings.core.errors import BrokerError
from tidings.core.session.client_session import ClientSession
from tidings.core.wire import decoders, messages
from tidings.core.wire.frames import FrameDecoder, frame
from tidings.testing import BrokerProcess

pytestmark = pytest.mark.integration
KDF = KdfParams(n=1 << 10)
HANDSHAKE_TIMEOUT_NS = 300_000_000
WAIT_S = 10.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("refusals")
    auth = root / "auth.toml"
    creds = {"one": add_identity(auth, "one", [], ["a/#"], ["#"], KDF),
             "ops": add_identity(auth, "ops", [], ["#"], ["#"], KDF)}
    with auth.open("a") as fh:
        fh.write("\n[identities.one.limits]\nconnections_max = 1\n")
    log = root / "broker.log"
    with BrokerProcess(root / "b", {"handshake_timeout_ns": HANDSHAKE_TIMEOUT_NS, "frame_bytes_max": 65536,
                                    "event_bytes_max": 4096},
                       http=True, args=["--auth", str(auth), "--allow-anonymous"], credential=str(creds["ops"]),
                       log=log) as b:
        yield b, creds, log


class Raw:
    """A client on a raw socket: what it sends is sent as it is; what comes back is decoded."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=WAIT_S)
        self.remote = f"127.0.0.1:{self.sock.getsockname()[1]}"  # as the broker sees it
        self.decoder = FrameDecoder(1 << 20)
        self.got: list[object] = []
        self.closed = False

    def send(self, data: bytes) -> Raw:
        self.sock.sendall(data)
        return self

    def until(self, done, timeout: float = WAIT_S) -> list[object]:
        """Read until `done(replies)` or the broker closes the connection, within `timeout`."""
        deadline = time.monotonic() + timeout
        while not done(self.got) and not self.closed:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                data = b""
            if time.monotonic() > deadline:
                raise AssertionError(f"no answer in time; got {self.got}")
            self.closed = not data
            self.got += [decoders.decode_broker_message(b) for b in self.decoder.feed(data)]
        return self.got

    def close(self) -> None:
        self.sock.close()


def authenticated(address: str, credential: Credential) -> Raw:
    session = ClientSession("svc", "i", credential, os.urandom(NONCE_BYTES))
    raw = Raw(address).send(session.hello())
    challenge = next(m for m in raw.until(lambda got: got) if isinstance(m, messages.Challenge))
    raw.send(session.answer(challenge))
    raw.until(lambda got: any(isinstance(m, messages.Welcome | messages.Error) for m in got))
    return raw


def errors(got: list[object]) -> list[messages.Error]:
    return [m for m in got if isinstance(m, messages.Error)]


def counted(got: list[object]) -> int:
    """Refusals the ERRORs received stand for."""
    return sum(e.context.get("count", 1) for e in errors(got))


def metrics(broker: BrokerProcess) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://{broker.http_address}/metrics", timeout=WAIT_S).read().decode()
    return {m[1]: float(m[2]) for m in re.finditer(r'^tidings_client_errors_total\{reason="([^"]+)"\} (\S+)$',
                                                    text, re.MULTILINE)}


def wait_for_line(log: Path, *parts: str) -> str:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if all(p in line for p in parts):
                return line
        time.sleep(0.02)  # polling a file another process writes, with a deadline
    raise AssertionError(f"no log line with {parts}:\n{log.read_text()[-3000:]}")


def hello() -> bytes:
    return messages.hello("anon", "1")


def wrong(credential: Credential) -> Credential:
    return Credential(credential.name, bytes(b ^ 1 for b in credential.secret))


# reason -> how a client gets it: (send on a fresh raw connection, or a function of the broker's
# address and credentials returning the connection), and whether the broker then closes it
CASES = {
    "frame-too-large": lambda a, c: Raw(a).send(hello() + struct.pack(">I", 1 << 30)),
    "bad-message": lambda a, c: Raw(a).send(hello() + frame(b"\xc1")),
    "unknown-message": lambda a, c: Raw(a).send(hello() + frame(msgpack.packb([999]))),
    "handshake": lambda a, c: Raw(a).send(messages.status_request(1)),
    "handshake-timeout": lambda a, c: Raw(a),
    "version-mismatch": lambda a, c: Raw(a).send(messages.hello("anon", "1", version=99)),
    "auth-failed": lambda a, c: authenticated(a, wrong(c["one"])),
    "limit-exceeded": lambda a, c: (authenticated(a, c["one"]), authenticated(a, c["one"]))[1],
    "forbidden": lambda a, c: authenticated(a, c["one"]).send(messages.publish(0, [["x/y", {}, b"no"]])),
    "bad-pattern": lambda a, c: Raw(a).send(hello() + messages.subscribe(
        messages.Subscribe(1, "a/#/b", None, "now", 0, None))),
}


@pytest.mark.parametrize("reason", list(CASES))
def test_each_kind_of_refusal_is_counted_under_its_reason_and_logged_with_the_address(broker, reason):
    b, creds, log = broker
    before = metrics(b)
    raw = CASES[reason](b.address, creds)
    got = raw.until(lambda got: counted(got) >= 1)
    assert [e.code for e in errors(got)] == [reason]
    after = metrics(b)
    assert after.get(reason, 0) == before.get(reason, 0) + 1
    assert {k: v for k, v in after.items() if k != reason} == {k: v for k, v in before.items() if k != reason}
    line = wait_for_line(log, "refused client", raw.remote, f"({reason})")
    assert "WARNING" in line or "warning" in line.lower()
    raw.close()


def test_a_flood_of_refusals_is_coalesced_and_logged_once_with_the_count_of_the_rest(broker):
    """Ten unknown messages at once on one connection: the first ERROR at once, the next held with
    the connection for the refusal window, and so on; all ten counted, one log line while it lasts
    and, when it goes, one saying how many were not logged."""
    b, _, log = broker
    before = metrics(b).get("unknown-message", 0)
    raw = Raw(b.address).send(hello() + frame(msgpack.packb([999])) * 10)
    t0 = time.monotonic()
    got = raw.until(lambda got: counted(got) >= 10)
    assert counted(got) == 10 and time.monotonic() - t0 >= 0.5  # one refused message a window (100 ms)
    assert metrics(b)["unknown-message"] == before + 10
    assert status_counts(b)["unknown-message"] == before + 10
    raw.close()
    wait_for_line(log, "refused client", raw.remote, "(unknown-message)")
    gone = wait_for_line(log, f"client {raw.remote}", "gone")
    assert "9 earlier refusals of this connection were not logged" in gone
    assert sum(raw.remote in line for line in log.read_text().splitlines()) == 2


def status_counts(b: BrokerProcess) -> dict[str, int]:
    text = urllib.request.urlopen(f"http://{b.http_address}/status", timeout=WAIT_S).read().decode()
    counts: dict[str, int] = json.loads(text)["client_errors"]
    assert counts == b.status()["client_errors"]  # the same through STATUS
    return counts


def test_the_client_learns_why_each_event_was_refused_even_when_its_errors_are_coalesced(broker):
    """A client library publishing batches with forbidden events in them, faster than the refusal
    window: one ERROR per reason and PUBLISH, later ones held and coalesced, and still every event
    answered, the refused ones with `forbidden` (not a bare rejection), the others logged."""
    b, creds, _ = broker
    with sync.connect(b.address, credential=str(creds["one"])) as client:
        t0 = time.monotonic()
        for _ in range(3):  # the 2nd and 3rd within the window of the 1st: held, then coalesced
            with pytest.raises(BrokerError) as err:
                client.publish_many([("a/ok", b"1"), ("x/no", b"2"), ("x/no", b"3"), ("a/ok", b"4"),
                                     ("x/no", b"5")])
            results = err.value.results
            assert [isinstance(r, BrokerError) for r in results] == [False, True, True, False, True]
            assert {r.code for r in results if isinstance(r, BrokerError)} == {"forbidden"}
            assert all(r.tick for r in results if not isinstance(r, BrokerError))
        assert time.monotonic() - t0 >= 0.2  # the 2nd and 3rd waited for their windows (100 ms each)
