"""The codec's one error: a packet the receiver must refuse, with the reason code 5.0 gives it.

A 5.0 receiver answers a `Refusal` with DISCONNECT (or CONNACK, before the connection is accepted)
carrying `reason` and then closes; a 3.1.1 receiver just closes (3.1.1 section 4.8: "close the
Network Connection"). `level` is the CONNECT's protocol level when the refusal is of a CONNECT whose
level was read, so an unsupported level is answered in the CONNACK its client can read.
"""

from __future__ import annotations

from tidings.core.mqtt.reason_codes import ReasonCode


class Refusal(Exception):
    """A malformed packet (0x81), a protocol error the codec can see (0x82), a packet over the
    Maximum Packet Size (0x95) or an unsupported protocol level (0x84)."""

    def __init__(self, reason: ReasonCode, detail: str, level: int | None = None) -> None:
        super().__init__(f"{reason.name.lower().replace('_', ' ')} (0x{reason:02X}): {detail}")
        self.reason = reason
        self.detail = detail
        self.level = level


def malformed(detail: str) -> Refusal:
    return Refusal(ReasonCode.MALFORMED_PACKET, detail)


def protocol_error(detail: str) -> Refusal:
    return Refusal(ReasonCode.PROTOCOL_ERROR, detail)
