"""The client session: the client's half of the wire protocol, sans-IO.

It validates what the application asks for before anything is sent (bad channels, patterns,
filters, attributes and oversized payloads fail at the call, with the same errors the broker would
give), numbers publishes and subscriptions, splits large publish batches into frames under the
broker's limits, and decodes what the broker sends into messages. It keeps no futures and does no
I/O: the asyncio client (tidings.client) pairs requests with answers.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from typing import Any

from tidings.core import defaults, errors
from tidings.core.auth.credentials import Credential, KdfParams
from tidings.core.auth.handshake import Challenge, ClientHandshake
from tidings.core.channels import validate_channel, validate_pattern
from tidings.core.errors import EventError, ProtocolError, StartError, TidingsError
from tidings.core.event import AttrValue, datetime_to_tick, validate_attributes
from tidings.core.filters import parse_filter
from tidings.core.publish.dedup import producer_problem, pseq_problem
from tidings.core.wire import decoders, messages
from tidings.core.wire.frames import FrameDecoder
from tidings.core.wire.types import ClientType

PUBLISH_FRAME_EVENTS_MAX = 4096
FRAME_OVERHEAD_BYTES = 64
VALID_CHANNELS_CACHED_MAX = 4096
FRAME_MARGIN_BYTES = 1024 * 1024
ACK_HEADS = (bytes((0x94, ClientType.ACK)), bytes((0x95, ClientType.ACK)))  # an ACK's msgpack array of 4 or 5, its type

Start = str | int | _dt.datetime
# an event as PUBLISH carries it, checked (`check_event`): (channel, attributes, payload), and for an
# idempotent publish (core/publish/dedup.py) (channel, attributes, payload, producer seq, producer)
PlainEvent = tuple[str, dict[str, AttrValue], bytes]
IdempotentEvent = tuple[str, dict[str, AttrValue], bytes, int, str]
PublishEvent = PlainEvent | IdempotentEvent

BrokerMessage = decoders.BrokerMessage


def start_spec(start: Start) -> tuple[str, int]:
    """`"now"`, `"start"`, a tick (deliver ticks after it) or a datetime (deliver from that time)."""
    if start in (messages.START_NOW, messages.START_OLDEST):
        return str(start), 0
    if isinstance(start, bool):
        raise StartError("start must be 'now', 'start', a tick or a datetime")
    if isinstance(start, int):
        if start < 0:
            raise StartError("a start tick cannot be negative")
        return messages.START_AFTER, start
    if isinstance(start, _dt.datetime):
        return messages.START_AFTER, max(0, datetime_to_tick(start) - 1)
    raise StartError(f"start must be 'now', 'start', a tick or a datetime, not {start!r}")


class ClientSession:
    def __init__(self, service: str, instance: str, credential: Credential | None = None,
                 nonce: bytes = b"") -> None:
        """With a `credential` the session authenticates as that identity (its name is the service),
        using `nonce` (fresh random bytes from the runtime) in the challenge-response."""
        if credential is not None:
            service = credential.name
        if not service:
            raise TidingsError("service must not be empty", errors.HANDSHAKE)
        self.service = service
        self.instance = instance
        self._auth = None if credential is None else ClientHandshake(credential, instance, nonce)
        self.pubend: str | None = None
        self.frame_bytes_max = defaults.FRAME_BYTES_MAX
        self.event_bytes_max = defaults.EVENT_BYTES_MAX
        self.lease_ns: int | None = None  # the broker's lease on subscriptions (core/subscription/leases.py)
        self.pings = True  # the broker answers HEARTBEAT (until it answers unknown-message: an older one)
        self._decoder = FrameDecoder(defaults.FRAME_BYTES_MAX + FRAME_MARGIN_BYTES)
        self._valid_channels: set[str] = set()
        self._next_seq = 0
        self._next_sub = 0
        self._next_req = 0

    def hello(self) -> bytes:
        nonce = None if self._auth is None else self._auth.client_nonce
        return messages.hello(self.service, self.instance, nonce=nonce)

    def answer(self, challenge: messages.Challenge, salted: bytes | None = None) -> bytes:
        """The AUTH frame proving the credential for the broker's CHALLENGE (`salted`: its salted key,
        derived already)."""
        if self._auth is None:
            raise ProtocolError(errors.HANDSHAKE, "the broker asks for a credential: connect with one", fatal=True)
        try:
            proof = self._auth.answer(Challenge(challenge.salt, KdfParams(*challenge.kdf), challenge.nonce), salted)
        except TidingsError as exc:
            raise ProtocolError(exc.code, str(exc), fatal=True) from None
        return messages.auth(proof)

    def receive(self, data: bytes, acks: bool = True) -> list[BrokerMessage]:
        """Decode what arrived; a broker that breaks the protocol raises ProtocolError. `acks` False:
        ACK frames are passed over undecoded (a publisher that awaits none: an MQTT QoS 0 one's)."""
        out: list[BrokerMessage] = []
        bodies = self._decoder.feed(data)
        if self._decoder.failure is not None:
            raise self._decoder.failure
        for body in bodies:
            if not acks and body[:2] in ACK_HEADS:
                continue
            msg = decoders.decode_broker_message(body)
            if isinstance(msg, messages.Welcome):
                if msg.version != messages.PROTOCOL_VERSION:
                    raise ProtocolError(errors.VERSION, f"broker speaks protocol {msg.version}", fatal=True)
                if self._auth is not None:
                    try:
                        self._auth.check_welcome(msg.info.get("server_signature"))
                    except TidingsError as exc:
                        raise ProtocolError(exc.code, str(exc), fatal=True) from None
                self.pubend = str(msg.info.get("pubend", ""))
                self.frame_bytes_max = int(msg.info.get("frame_bytes_max", self.frame_bytes_max))
                self.event_bytes_max = int(msg.info.get("event_bytes_max", self.event_bytes_max))
                lease = msg.info.get("lease_ns")
                self.lease_ns = lease if type(lease) is int and lease > 0 else None
                # the broker's frames: events up to its event_bytes_max, with room for attributes
                self._decoder.frame_bytes_max = self.frame_bytes_max + FRAME_MARGIN_BYTES
            out.append(msg)
        return out

    def check_event(self, channel: str, payload: bytes | str = b"", attributes: Any = None,
                    producer: str | None = None, seq: int | None = None) -> PublishEvent:
        """The event as `publish` takes it: (channel, attributes, payload), and for an idempotent
        publish (core/publish/dedup.py) its producer sequence and producer after those."""
        if producer is not None or seq is not None:
            problem = producer_problem(producer) or pseq_problem(seq)
            if problem is not None or producer is None or seq is None:
                raise EventError(f"idempotent publish: {problem}")
            return (*self._check_event(channel, payload, attributes), seq, producer)
        return self._check_event(channel, payload, attributes)

    def _check_event(self, channel: str, payload: bytes | str = b"", attributes: Any = None) -> PlainEvent:
        if channel not in self._valid_channels:
            validate_channel(channel)
            if len(self._valid_channels) >= VALID_CHANNELS_CACHED_MAX:
                self._valid_channels.clear()
            self._valid_channels.add(channel)
        if isinstance(payload, str):
            payload = payload.encode("utf-8")
        elif not isinstance(payload, bytes | bytearray | memoryview):
            raise EventError(f"payload must be bytes or str, not {type(payload).__name__}")
        elif type(payload) is not bytes:
            payload = bytes(payload)
        if len(payload) > self.event_bytes_max:
            raise EventError(f"payload of {len(payload)} bytes exceeds event_bytes_max="
                             f"{self.event_bytes_max}", errors.EVENT_TOO_LARGE)
        return (channel, validate_attributes(attributes) if attributes else {}, payload)

    def publish(self, events: Sequence[PublishEvent]) -> list[tuple[int, int, bytes]]:
        """Frames for checked events: a list of (first seq, event count, frame). Events of one
        producer share a frame; a frame never mixes producers (nor idempotent and plain events)."""
        out: list[tuple[int, int, bytes]] = []
        budget = self.frame_bytes_max // 2
        chunk: list[PublishEvent] = []
        size = 0
        producer = None
        for ev in events:
            ev_size = len(ev[2]) + len(ev[0]) + FRAME_OVERHEAD_BYTES + 32 * len(ev[1])
            ev_producer = ev[4] if len(ev) == 5 else None
            if chunk and (size + ev_size > budget or len(chunk) >= PUBLISH_FRAME_EVENTS_MAX
                          or ev_producer != producer):
                out.append(self._publish_frame(chunk, producer))
                chunk, size = [], 0
            chunk.append(ev)
            size += ev_size
            producer = ev_producer
        if chunk:
            out.append(self._publish_frame(chunk, producer))
        return out

    def _publish_frame(self, chunk: list[PublishEvent], producer: str | None) -> tuple[int, int, bytes]:
        seq = self._next_seq
        self._next_seq += len(chunk)
        if producer is None:
            return seq, len(chunk), messages.publish(seq, chunk)
        return seq, len(chunk), messages.publish(seq, [ev[:4] for ev in chunk], producer)

    def subscribe(self, pattern: str, filter: str | None = None, start: Start = "now",
                  end: int | None = None, order: str = messages.ORDER_PUBLISHER,
                  positions: list[list[str | int]] | None = None,
                  home: list[str | int] | str | None = None) -> tuple[int, bytes]:
        """`positions` makes the subscription durable (core/durable/checkpoint.py): [[pubend, tick], ...]
        overriding the start for the pubends named; `home` is the token's [address, pubend,
        registration], where the subscription was registered, or the name of a broker-held one."""
        validate_pattern(pattern)
        if filter:
            parse_filter(filter)
        kind, after = start_spec(start)
        if end is not None and (isinstance(end, bool) or not isinstance(end, int) or end < 0):
            raise StartError("end must be a non-negative tick")
        if order not in messages.ORDERS:
            raise StartError(f"order must be one of {', '.join(messages.ORDERS)}")
        if order == messages.ORDER_TOTAL and (kind != messages.START_NOW or end is not None):
            raise StartError("a total-order subscription starts now and has no end")
        self._next_sub += 1
        if positions is not None and (end is not None or order != messages.ORDER_PUBLISHER
                                      or kind == messages.START_OLDEST):
            raise StartError("a durable subscription starts now, at a tick or time, or at a token; "
                             "in publisher order; without an end")
        msg = messages.Subscribe(self._next_sub, pattern, filter or None, kind, after, end, order, positions, home)
        return self._next_sub, messages.subscribe(msg)

    def read(self, pattern: str, filter: str | None, after: int, end: int, spans: bool = False) -> tuple[int, bytes]:
        """A READ: the ticks `(after, end]` of the broker's own pubend that match, in bulk (with
        `spans`, the broker may answer with the log's own bytes: messages.Span)."""
        validate_pattern(pattern)
        if filter:
            parse_filter(filter)
        for name, tick in (("after", after), ("end", end)):
            if isinstance(tick, bool) or not isinstance(tick, int) or tick < 0:
                raise StartError(f"a read's {name} must be a non-negative tick")
        self._next_sub += 1
        return self._next_sub, messages.read(messages.Read(self._next_sub, pattern, filter or None, after, end, spans))

    @property
    def renew_interval_ns(self) -> int | None:
        """How often to send `renew()` so that a frame or two lost to a slow link does not end the
        lease (a third of it); None when the broker grants no lease."""
        return None if self.lease_ns is None else max(1, self.lease_ns // 3)

    def renew(self) -> bytes:
        return messages.renew()

    def heartbeat(self) -> bytes:
        """A frame the broker answers at once (core/session/roaming.py): HEARTBEAT, or for
        a broker older than HEARTBEAT a STATUS request, whose reply nobody awaits."""
        return messages.heartbeat() if self.pings else self.status()[1]

    def unknown_to_broker(self) -> None:
        """The broker answered unknown-message to what this session sent unasked for: a HEARTBEAT (the
        only message it sends without the broker's WELCOME saying it is served). STATUS from now on."""
        self.pings = False

    def unsubscribe(self, sub: int, forget: bool = False) -> bytes:
        return messages.unsubscribe(sub, forget)

    def release(self, sub: int, checkpoint: list[object]) -> bytes:
        """RELEASE of a durable subscription's checkpoint, [default, [[pubend, tick], ...]]."""
        return messages.release(sub, checkpoint)

    def status(self) -> tuple[int, bytes]:
        self._next_req += 1
        return self._next_req, messages.status_request(self._next_req)
