"""The incremental MQTT decoder: bytes in, packets out, or one refusal that ends the stream.

Theory of operation. `PacketDecoder` is sans-IO, shaped as core/wire/frames.py's FrameDecoder:
`push` what arrived, `pull` one packet at a time (or `feed`: push, then every whole packet). Each
packet is a fixed header (type and flags in one byte, then the remaining length as a Variable Byte
Integer of at most four bytes) and a body of that length (core/mqtt/decode.py reads it). The fixed
header is judged as soon as it is whole, before a byte of the body is kept: a packet type of 0 (or
15 on a 3.1.1 connection), reserved flag bits that differ from the specification's (2.1.3: 0010 for
PUBREL, SUBSCRIBE and UNSUBSCRIBE, 0000 for the others but PUBLISH), a remaining length over four
bytes or not in its shortest form, and a packet (fixed header included) over `packet_bytes_max` (the
Maximum Packet Size we announce, 3.1.2.11.4: 0x95 Packet Too Large) are refused there, so a declared
length never makes us buffer: the buffer grows only with bytes that arrived. Once every whole packet
is pulled, `held_bytes` is under `packet_bytes_max + 5` (a packet not yet whole, and at most four
bytes of a header).

The first refusal is final for the stream: `pull` returns None from then on, `failure` holds the
`Refusal` (its reason code is the one 5.0 answers with: core/mqtt/refusal.py) and what was held is
dropped; the protocol machine answers it and closes. The protocol level is `version`: None until a
CONNECT is decoded (a server's decoder; the CONNECT's own level sets it, and any other packet first is
a protocol error), or given at construction (a client's decoder, a test's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from tidings.core.mqtt.decode import PublishFields, decode_body, publish_fields
from tidings.core.mqtt.fields import read_vbi
from tidings.core.mqtt.packet_type import MQTT_5, PacketType
from tidings.core.mqtt.packets import Connect, Packet
from tidings.core.mqtt.properties import NO_PROPERTIES, Properties
from tidings.core.mqtt.reason_codes import ReasonCode
from tidings.core.mqtt.refusal import Refusal, malformed, protocol_error
from tidings.core.wire.held import HeldBytes

try:
    from tidings.core.mqtt import _publishes  # the compiled read of a PUBLISH run (setup.py): optional
except ImportError:  # pragma: no cover - built wherever a C compiler was
    _publishes = None  # type: ignore[assignment]

FIXED_HEADER_BYTES_MAX: Final = 5  # the type byte and a four-byte remaining length
PACKET_BYTES_MAX: Final = 1 + 4 + 268_435_455  # the largest packet the encoding can express
PUBACK_FIRST: Final = PacketType.PUBACK << 4  # a PUBACK's first byte (its flags 0000)
PUBACK_BYTES: Final = 4  # a PUBACK of a packet id alone
# the fixed header's flags every type but PUBLISH must carry (2.1.3)
_FLAGS_0010: Final = (PacketType.PUBREL, PacketType.SUBSCRIBE, PacketType.UNSUBSCRIBE)
REQUIRED_FLAGS: Final[dict[int, int]] = {t: (0x02 if t in _FLAGS_0010 else 0) for t in PacketType
                                         if t != PacketType.PUBLISH}


Take = Callable[[bytearray, int, int, int, Properties], tuple[list[PublishFields], int]]
_take: Take | None = None if _publishes is None else _publishes.take  # (use_native)


def use_native(on: bool) -> None:
    """`take_publishes` reads the plain PUBLISHes at the head in C first when `on` and it is built
    (core/mqtt/_publishes.c; the runtime's switch: off with TIDINGS_NATIVE_MQTT=0, aio/mqtt.py)."""
    global _take  # noqa: PLW0603 - the one switch, set by the runtime at start
    _take = _publishes.take if on and _publishes is not None else None


def native() -> bool:
    """Whether `take_publishes` reads in C first."""
    return _take is not None


class PacketDecoder(HeldBytes[Refusal]):
    """Split a byte stream into MQTT packets (module doc); `failure` once the stream is refused."""

    __slots__ = ("packet_bytes_max", "version")

    def __init__(self, packet_bytes_max: int, version: int | None = None) -> None:
        assert 2 <= packet_bytes_max <= PACKET_BYTES_MAX, packet_bytes_max
        self.packet_bytes_max = packet_bytes_max
        self.version = version
        super().__init__()

    def _fail(self, refusal: Refusal) -> None:
        self.clear()
        self.failure = refusal

    def _check_type(self, ptype: int, flags: int) -> None:
        if ptype == 0 or (ptype == PacketType.AUTH and self.version is not None and self.version != MQTT_5):
            raise malformed(f"packet type {ptype} is reserved")
        if self.version is None and ptype != PacketType.CONNECT:
            raise protocol_error(f"{PacketType(ptype).name} before CONNECT")
        required = REQUIRED_FLAGS.get(ptype)
        if required is not None and flags != required:
            raise malformed(f"{PacketType(ptype).name} with fixed-header flags {flags:04b}, not {required:04b}")

    def pull(self) -> Packet | None:
        """The next whole packet, or None (then see `failure`)."""
        if self.failure is not None:
            return None
        buf = self._buffer
        pos = self._pos
        end = len(buf)
        if end - pos < 2:
            return None
        try:
            length = buf[pos + 1]
            if length < 0x80:  # a one-byte remaining length: most packets
                body_at = pos + 2
            else:
                length, body_at = read_vbi(buf, pos + 1, end, "remaining length")
                if body_at < 0:
                    return None
            first = buf[pos]
            ptype, flags = first >> 4, first & 0x0F
            if ptype != PacketType.PUBLISH or self.version is None:
                self._check_type(ptype, flags)
            size = body_at - pos + length
            if size > self.packet_bytes_max:
                raise Refusal(ReasonCode.PACKET_TOO_LARGE,
                              f"a packet of {size} bytes exceeds the Maximum Packet Size {self.packet_bytes_max}")
            stop = body_at + length
            if stop > end:
                return None
            body = bytes(buf[body_at:stop])
            self._pos = stop
            self.held_bytes = end - stop
            version = self.version
            packet = decode_body(ptype, flags, body, MQTT_5 if version is None else version)
        except Refusal as refusal:
            self._fail(refusal)
            return None
        if version is None and isinstance(packet, Connect):
            self.version = packet.protocol_level
        return packet

    def take_publishes(self) -> list[PublishFields]:
        """The run of whole PUBLISH packets at the head of what is held, as their fields (no Publish
        built: core/mqtt/publish_run.py reads a client's PUBLISHes so). It stops before any other
        packet, one not yet whole, and one to be refused: `pull` then gives (or refuses) it as it
        would have. Only once the protocol level is known. The compiled read (`use_native`) takes
        the plain ones at the head first, as this loop would read them, and the loop goes on from
        where it stopped."""
        version = self.version
        if self.failure is not None or version is None:
            return []
        buf = self._buffer
        pos = self._pos
        end = len(buf)
        out: list[PublishFields]
        out, pos = ([], pos) if _take is None else _take(buf, pos, self.packet_bytes_max, version, NO_PROPERTIES)
        while end - pos >= 2 and buf[pos] >> 4 == PacketType.PUBLISH:
            length = buf[pos + 1]
            body_at = pos + 2
            try:
                if length >= 0x80:
                    length, body_at = read_vbi(buf, pos + 1, end, "remaining length")
                stop = body_at + length
                if body_at < 0 or stop > end or stop - pos > self.packet_bytes_max:
                    break
                out.append(publish_fields(buf, body_at, stop, buf[pos] & 0x0F, version))
            except Refusal:
                break
            pos = stop
        self._pos = pos
        self.held_bytes = end - pos
        return out

    def take_pubacks(self) -> list[int]:
        """The packet identifiers of the run of PUBACKs without a reason code (four bytes each: 3.4.2.1)
        at the head of what is held, as `take_publishes` reads PUBLISHes; any other, `pull` gives."""
        if self.failure is not None or self.version is None or self.packet_bytes_max < PUBACK_BYTES:
            return []
        buf = self._buffer
        pos = self._pos
        end = len(buf)
        out: list[int] = []
        while end - pos >= PUBACK_BYTES and buf[pos] == PUBACK_FIRST and buf[pos + 1] == 2:
            pid = (buf[pos + 2] << 8) | buf[pos + 3]
            if not pid:
                break
            out.append(pid)
            pos += PUBACK_BYTES
        self._pos = pos
        self.held_bytes = end - pos
        return out

    def take(self) -> list[Packet]:
        """Every whole packet held; see `failure` afterwards."""
        out: list[Packet] = []
        while (packet := self.pull()) is not None:
            out.append(packet)
        return out

    def feed(self, data: bytes) -> list[Packet]:
        """`push(data)`, then every whole packet; see `failure` afterwards."""
        self.push(data)
        return self.take()
