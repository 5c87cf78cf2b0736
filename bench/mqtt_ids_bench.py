#!/usr/bin/env python3
"""What keeping a persistent session's packet ids through a kill -9 costs (core/mqtt/inflight_ids.py):
the broker's CPU per delivery, and the deliveries per second, for one MQTT subscriber at QoS 1 or 2,
persistent or clean, fed by a native publisher, on a real broker (sockets, disk, the saver thread).

  python bench/mqtt_ids_bench.py [--events 3000] [--rounds 2]

The subscriber (paho-mqtt 5.0, Receive Maximum 100) answers every delivery (PUBACK; PUBREC, then
PUBCOMP); the broker's CPU is its process's user+system time from /proc (every thread, the saver's
too) over the run. Compare a branch with its base by running each with its own PYTHONPATH.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from tidings import sync
from tidings.testing import BrokerProcess

WAIT_S = 20.0
WINDOW = 100  # the subscriber's Receive Maximum


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def publish(address: str, events: int, qos: int) -> None:
    """The native publisher: `events` of 64 bytes, 100 to a call, as QoS `qos` messages (a native
    event counts as QoS 1; `mqtt.qos` = 2 makes it a QoS 2 one, delivered through PUBREC/PUBCOMP)."""
    attributes = {"mqtt.qos": 2} if qos == 2 else {}
    with sync.connect(address, service="bench") as native:
        for i in range(0, events, 100):
            native.publish_many([("ib/x", b"x" * 64, attributes)] * min(100, events - i))


def run(events: int, qos: int, persistent: bool) -> tuple[float, float]:
    """(broker CPU µs per delivery, deliveries per second)."""
    import paho.mqtt.client as paho
    from paho.mqtt.enums import CallbackAPIVersion
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties as PahoProperties

    with tempfile.TemporaryDirectory(prefix="mqtt-ids-") as tmp:
        broker = BrokerProcess(Path(tmp) / "b", args=["--mqtt", "127.0.0.1:0"]).start()
        client = paho.Client(CallbackAPIVersion.VERSION2, client_id="bench-sub", protocol=paho.MQTTv5)
        try:
            host, port = broker.mqtt_address.rsplit(":", 1)
            got = threading.Semaphore(0)
            subscribed = threading.Event()
            qos_seen: set[int] = set()
            client.on_message = lambda c, u, m: (qos_seen.add(m.qos), got.release())
            client.on_subscribe = lambda c, u, mid, codes, props: subscribed.set()
            props = PahoProperties(PacketTypes.CONNECT)
            props.SessionExpiryInterval = 3600 if persistent else 0
            props.ReceiveMaximum = WINDOW
            client.connect(host, int(port), 60, clean_start=not persistent, properties=props)
            client.loop_start()
            client.subscribe("ib/#", qos)
            assert subscribed.wait(WAIT_S), "no SUBACK"
            assert broker.proc is not None
            pid = broker.proc.pid
            start_cpu, start = cpu_s(pid), time.monotonic()
            publish(broker.address, events, qos)
            for _ in range(events):
                assert got.acquire(timeout=WAIT_S), "a delivery did not come"
            elapsed, used = time.monotonic() - start, cpu_s(pid) - start_cpu
            assert qos_seen == {qos}, qos_seen
            return used / events * 1e6, events / elapsed
        finally:
            client.loop_stop()
            client.disconnect()
            broker.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    print(f"tidings from {sys.modules['tidings'].__file__}")
    for qos in (1, 2):
        for persistent in (False, True):
            for r in range(args.rounds):
                us, rate = run(args.events, qos, persistent)
                kind = "persistent" if persistent else "clean"
                print(f"qos {qos} {kind:10} round {r}: {us:7.1f} us broker CPU per delivery, {rate:8.0f} deliveries/s",
                      flush=True)


if __name__ == "__main__":
    main()
