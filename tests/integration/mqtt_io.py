"""MQTT clients for the MQTT tests: paho-mqtt (3.1.1 and 5.0) in a blocking shape, and the
mosquitto_pub / mosquitto_sub command-line clients (Debian's mosquitto-clients), skipped with a
reason when absent. Every wait has a deadline."""

from __future__ import annotations

import queue
import shutil
import ssl
import subprocess
import threading
import time
from typing import Any

import pytest

paho = pytest.importorskip("paho.mqtt.client", reason="paho-mqtt is not installed (pip install -e '.[test]')")
from paho.mqtt.enums import CallbackAPIVersion  # noqa: E402
from paho.mqtt.packettypes import PacketTypes  # noqa: E402
from paho.mqtt.properties import Properties  # noqa: E402
from paho.mqtt.subscribeoptions import SubscribeOptions  # noqa: E402

V311, V5 = paho.MQTTv311, paho.MQTTv5
WAIT_S = 15.0


def mosquitto(tool: str) -> str:
    """The path of `mosquitto_pub` or `mosquitto_sub`, or a skip saying how to get it (`make test` installs it)."""
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} is not installed (Debian's mosquitto-clients: `make test` installs it)")
    return path


class Mqtt:
    """One paho client, connected at construction (`code`: the CONNACK's reason code, 5.0 numbering)."""

    def __init__(self, address: str, client_id: str, version: int = V5, username: str | None = None,
                 password: str | None = None, tls_ca: str | None = None, expect_refusal: bool = False,
                 clean: bool = True, in_flight: int | None = None, session_expiry_s: int = 3600,
                 will: tuple[str, bytes, int] | None = None) -> None:
        """`clean=False`: a persistent session (3.1.1's Clean Session 0; 5.0's Clean Start 0 with a
        Session Expiry Interval of `session_expiry_s`, an hour); `in_flight`: paho's window of QoS 1/2
        PUBLISHes (20); `will`: (topic, payload, 5.0's Will Delay Interval in seconds), at QoS 1."""
        host, port = address.rsplit(":", 1)
        self.client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=version,
                                  **({"clean_session": clean} if version == V311 else {}))
        self.session_present: bool | None = None
        self.messages: queue.Queue[Any] = queue.Queue()
        self.acks: dict[int, int] = {}  # mid -> PUBACK reason code
        self.subacks: dict[int, list[int]] = {}
        self.disconnect_code: int | None = None
        self._cond = threading.Condition()
        self.code: int | None = None
        if in_flight is not None:
            self.client.max_inflight_messages_set(in_flight)
        if username is not None:
            self.client.username_pw_set(username, password)
        if tls_ca is not None:
            self.client.tls_set(ca_certs=tls_ca, cert_reqs=ssl.CERT_REQUIRED)
        self.client.on_connect = self._on_connect
        self.client.on_message = lambda c, u, m: self.messages.put(m)
        self.client.on_publish = self._on_publish
        self.client.on_subscribe = self._on_subscribe
        self.client.on_disconnect = self._on_disconnect
        if will is not None:
            will_props = None
            if version == V5:
                will_props = Properties(PacketTypes.WILLMESSAGE)
                will_props.WillDelayInterval = will[2]
            self.client.will_set(will[0], will[1], 1, properties=will_props)
        connect_props = None
        if version == V5 and not clean:
            connect_props = Properties(PacketTypes.CONNECT)
            connect_props.SessionExpiryInterval = session_expiry_s
        self._connect_args: dict[str, Any] = {}
        if version == V5:
            self._connect_args = {"clean_start": clean, "properties": connect_props}
        self.client.connect(host, int(port), keepalive=30, **self._connect_args)
        self.client.loop_start()
        self._wait(lambda: self.code is not None, "CONNACK")
        if not expect_refusal:
            assert self.code == 0, f"CONNECT refused with 0x{self.code:02X}"

    def _on_connect(self, client: Any, userdata: Any, flags: Any, code: Any, props: Any) -> None:
        with self._cond:
            self.code = code.value
            self.session_present = bool(flags.session_present)
            self._cond.notify_all()

    def _on_publish(self, client: Any, userdata: Any, mid: int, code: Any, props: Any) -> None:
        with self._cond:
            self.acks[mid] = code.value
            self._cond.notify_all()

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, codes: Any, props: Any) -> None:
        with self._cond:
            self.subacks[mid] = [c.value for c in codes]
            self._cond.notify_all()

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, code: Any, props: Any) -> None:
        with self._cond:
            self.disconnect_code = code.value
            self._cond.notify_all()

    def _wait(self, done: Any, what: str) -> None:
        with self._cond:
            if not self._cond.wait_for(done, WAIT_S):
                raise TimeoutError(f"no {what} within {WAIT_S} s")

    def subscribe(self, topic: str, qos: int = 1, content_filter: str | None = None,
                  retain_handling: int = 0, retain_as_published: bool = False, no_local: bool = False,
                  identifier: int | None = None) -> list[int]:
        """SUBSCRIBE and wait for its SUBACK: the codes (5.0 numbering; 3.1.1's failure reads 0x80).
        `retain_handling`, `retain_as_published` and `no_local`: the 5.0 subscription options;
        `identifier` its Subscription Identifier."""
        props = None
        if content_filter is not None or identifier is not None:
            props = Properties(PacketTypes.SUBSCRIBE)
            if content_filter is not None:
                props.UserProperty = ("filter", content_filter)
            if identifier is not None:
                props.SubscriptionIdentifier = identifier
        if retain_handling or retain_as_published or no_local:
            options = SubscribeOptions(qos, noLocal=no_local, retainAsPublished=retain_as_published,
                                       retainHandling=retain_handling)
            _, mid = self.client.subscribe(topic, options=options, properties=props)
        else:
            _, mid = self.client.subscribe(topic, qos, properties=props)
        self._wait(lambda: mid in self.subacks, "SUBACK")
        return self.subacks[mid]

    def publish(self, topic: str, payload: bytes, qos: int = 1, user: dict[str, str] | None = None,
                content_type: str | None = None, wait: bool = True, retain: bool = False,
                **more: Any) -> int | None:
        """PUBLISH; at QoS 1 wait for the PUBACK and return its reason code. `more`: further 5.0
        properties by paho's names (ResponseTopic=..., CorrelationData=..., MessageExpiryInterval=...)."""
        props = None
        if user or content_type or more:
            props = Properties(PacketTypes.PUBLISH)
            for name, value in more.items():
                setattr(props, name, value)
            if user:
                props.UserProperty = list(user.items())
            if content_type:
                props.ContentType = content_type
        info = self.client.publish(topic, payload, qos, retain, properties=props)
        if qos == 0 or not wait:
            return None
        self._wait(lambda: info.mid in self.acks or self.disconnect_code is not None, "PUBACK")
        return self.acks.get(info.mid)

    def reconnect(self, address: str) -> None:
        """Connect the same paho client again, to `address` (a restarted broker's new port): paho
        resends what it had in flight (a QoS 2 PUBLISH unanswered with DUP, PUBREL after a PUBREC)."""
        self.client.loop_stop()
        host, port = address.rsplit(":", 1)
        with self._cond:
            self.code = None
        self.client.connect_async(host, int(port), keepalive=30, **self._connect_args)
        self.client.reconnect()
        self.client.loop_start()
        self._wait(lambda: self.code is not None, "CONNACK")
        assert self.code == 0, f"CONNECT refused with 0x{self.code:02X}"

    def get(self, timeout: float = WAIT_S) -> Any:
        return self.messages.get(timeout=timeout)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def until_delivered(publish: Any, receive: Any, timeout: float = 30.0) -> Any:
    """Publish probes until one arrives (a subscription on another broker joins its tree first);
    `receive(seconds)` returns the next message or raises/returns None. Returns the first received."""
    deadline = time.monotonic() + timeout
    n = 0
    while time.monotonic() < deadline:
        publish(n)
        n += 1
        try:
            got = receive(0.5)
        except (queue.Empty, TimeoutError):
            got = None
        if got is not None:
            return got
    raise TimeoutError(f"no probe delivered within {timeout} s")


def mosquitto_sub(address: str, topic: str, count: int, version: str = "mqttv311",
                  extra: list[str] | None = None) -> subprocess.Popen[str]:
    """mosquitto_sub printing `count` messages (-v: topic and payload) then exiting."""
    host, port = address.rsplit(":", 1)
    return subprocess.Popen([mosquitto("mosquitto_sub"), "-h", host, "-p", port, "-t", topic, "-q", "1", "-v",
                             "-C", str(count), "-V", version, "-W", str(int(WAIT_S * 2)), *(extra or [])],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def mosquitto_pub(address: str, topic: str, message: str, version: str = "mqttv311",
                  extra: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    host, port = address.rsplit(":", 1)
    return subprocess.run([mosquitto("mosquitto_pub"), "-h", host, "-p", port, "-t", topic, "-m", message,
                           "-q", "1", "-V", version, *(extra or [])],
                          capture_output=True, text=True, timeout=WAIT_S, check=False)
