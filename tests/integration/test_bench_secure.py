"""The benchmark's tidings load client over TLS with a credential (bench/tidings_client.py, as
bench/run.py --tidings-modes auth+tls drives it): it completes the SCRAM handshake through TLS,
publishes a batch, has it acknowledged and receives it with select() on the socket, and a wrong
credential is refused. A few seconds; the figures themselves are not checked."""

import select
import sys
import time
from pathlib import Path

import pytest

from tidings.aio.auth_file import add_identity
from tidings.aio.tls import client_context
from tidings.core.auth.credentials import KdfParams
from tidings.testing import BrokerProcess

from .test_tls import certs, tls_args  # noqa: F401 (certs is a fixture)

pytestmark = pytest.mark.integration

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import tidings_client  # noqa: E402

EVENTS = 250
DEADLINE_S = 20.0


def test_the_load_client_authenticates_over_tls_publishes_and_receives(tmp_path, certs):  # noqa: F811
    auth = tmp_path / "auth.toml"
    credential = str(add_identity(auth, "bench", [], ["bench/#"], ["bench/#"], KdfParams(n=1 << 10)))
    trusted = client_context(certs["ca_pem"])
    with BrokerProcess(tmp_path / "b", args=[*tls_args(certs), "--auth", str(auth)], tls=trusted,
                       credential=credential) as broker:
        sub = tidings_client.TidingsConnection(broker.port, "sub-0", credential, certs["ca_pem"])
        pub = tidings_client.TidingsConnection(broker.port, "pub", credential, certs["ca_pem"])
        try:
            assert isinstance(sub.sock, tidings_client.TlsSocket)
            sub.subscribe(1, "bench/smoke")
            events, acks = tidings_client.EventsCounter(want_stamps=True), tidings_client.AckCounter()
            received, acked = events.feed(sub.leftover())[0], acks.feed(pub.leftover())[0]
            builder = tidings_client.PublishBuilder("bench/smoke")
            for _ in range(EVENTS // 50):
                pub.sock.sendall(builder.build(50, time.perf_counter_ns().to_bytes(8, "big") + b"x" * 92))
            deadline = time.monotonic() + DEADLINE_S
            while (received < EVENTS or acked < EVENTS) and time.monotonic() < deadline:
                readable, _, _ = select.select([sub.sock, pub.sock], [], [], 0.5)
                for sock in readable:
                    data = sock.recv(1 << 16)
                    assert data, "the broker closed a load connection"
                    if sock is sub.sock:
                        received += events.feed(data)[0]
                    else:
                        acked += acks.feed(data)[0]
            assert (received, acked) == (EVENTS, EVENTS)
            assert len(events.stamps) == EVENTS and not events.errors and not acks.errors
        finally:
            sub.close()
            pub.close()
        wrong = credential[:-4] + ("AAAA" if not credential.endswith("AAAA") else "BBBB")
        with pytest.raises(ConnectionError, match="auth-failed"):
            tidings_client.TidingsConnection(broker.port, "pub", wrong, certs["ca_pem"])
