"""A flood of MQTT CONNECTs with wrong passwords does not stop the broker (core/mqtt/derivations.py,
aio/mqtt.py): each password costs the broker scrypt (about 80 ms at the identity's default cost), run
on worker threads, at most a few at once per broker and per source address, the rest refused at
once (CONNACK 0x9F). While 200 such CONNECTs arrive, a client publishing and receiving at a steady
rate keeps its latency bounded (p99 under 100 ms), and every wrong CONNECT is refused."""

import socket
import threading
import time

import pytest

from tidings.aio.auth_file import add_identity
from tidings.core.auth.credentials import b64, parse_credential
from tidings.core.mqtt import packets as p
from tidings.core.mqtt.codec import PacketDecoder
from tidings.core.mqtt.encode import encode
from tidings.testing import BrokerProcess

from .mqtt_io import V5, Mqtt

pytestmark = pytest.mark.integration
FLOOD = 200  # CONNECTs with a wrong password
AT_ONCE = 25  # of them open at the same moment
STEADY_INTERVAL_S = 0.01
P99_MS_MAX = 100.0


def wrong_connect(address: str, i: int, codes: list[int], deadline: float) -> None:
    """One CONNECT with a wrong password; the CONNACK's reason code (or -1: none) into `codes`."""
    host, port = address.rsplit(":", 1)
    code = -1
    with socket.create_connection((host, int(port)), timeout=max(0.1, deadline - time.monotonic())) as sock:
        sock.sendall(encode(p.Connect(5, f"dev-flood-{i}", username="sensor", password=b64(b"w" * 32).encode()), 5))
        decoder = PacketDecoder(1 << 20, 5)
        while time.monotonic() < deadline:
            data = sock.recv(4096)
            packets = decoder.feed(data) if data else []
            if packets or not data:
                code = packets[0].reason_code if packets and isinstance(packets[0], p.Connack) else -1
                break
    codes.append(code)


def flood(address: str, codes: list[int]) -> None:
    deadline = time.monotonic() + 60
    for wave in range(0, FLOOD, AT_ONCE):
        threads = [threading.Thread(target=wrong_connect, args=(address, i, codes, deadline))
                   for i in range(wave, min(FLOOD, wave + AT_ONCE))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))


def test_a_flood_of_wrong_passwords_neither_stalls_the_broker_nor_gets_in(tmp_path):
    auth = tmp_path / "auth.toml"
    credential = add_identity(auth, "sensor", ["dev-*"], ["sensors/#"], ["sensors/#"])  # scrypt's default cost
    viewer = add_identity(auth, "viewer", ["*"], [], [])  # the harness's own connection (status)
    with BrokerProcess(tmp_path / "broker", args=["--auth", str(auth), "--mqtt", "127.0.0.1:0"],
                       credential=str(viewer)) as broker:
        assert broker.mqtt_address is not None
        steady = Mqtt(broker.mqtt_address, "dev-steady", V5, "sensor", b64(parse_credential(str(credential)).secret))
        try:
            assert steady.subscribe("sensors/steady", qos=0) == [0]
            latencies: list[float] = []

            def probe() -> None:
                sent = time.perf_counter()
                steady.publish("sensors/steady", str(sent).encode(), qos=0)
                message = steady.get(5)
                latencies.append(time.perf_counter() - float(message.payload))

            for _ in range(20):  # its tree is joined: the steady state before the flood
                probe()
            codes: list[int] = []
            flooder = threading.Thread(target=flood, args=(broker.mqtt_address, codes))
            flooder.start()
            latencies.clear()
            deadline = time.monotonic() + 90
            while flooder.is_alive() and time.monotonic() < deadline:
                probe()
                time.sleep(STEADY_INTERVAL_S)  # the steady client's pace, not a synchronisation
            flooder.join(max(0.0, deadline - time.monotonic()))
            assert not flooder.is_alive()
        finally:
            steady.close()
        mqtt = broker.status()["mqtt"]
    assert len(codes) == FLOOD and set(codes) <= {0x86, 0x9F}, sorted(set(codes))
    assert codes.count(0x86) >= 1 and mqtt["derivations_asked"] >= 1 + codes.count(0x86)
    assert mqtt["derivations_refused"] == codes.count(0x9F) and mqtt["derivations_in_flight"] == 0
    latencies.sort()
    p99_ms = latencies[int(len(latencies) * 0.99) - 1] * 1000
    print(f"steady client: {len(latencies)} round trips, p50 {latencies[len(latencies) // 2] * 1000:.1f} ms, "
          f"p99 {p99_ms:.1f} ms; flood: {codes.count(0x86)} derived and refused (0x86), "
          f"{codes.count(0x9F)} refused at once (0x9F)")
    assert len(latencies) >= 20 and p99_ms < P99_MS_MAX
