"""Ack consolidation: the acks one input produces, one ACK message per upstream broker.

Theory of operation (Gryphon exactly-once, §3.2: acks are consolidated on the way up). While the
reliability node handles one input (an event, a peer's ack or nack, a timer), each stream whose ack
point, release point or delivered point moved asks for a `StreamAck` to its upstream broker (the
parent, or at the root the pubend's broker). Those requests gather here; when the input is done the
node drains them: one ACK per upstream broker, naming every stream acked to it in the order asked,
split at `ACK_ENTRIES_MAX` entries. Handling an ACK to this broker itself (the root of its own
pubend's tree) may ask for more acks, so the node drains until nothing is left.

The batcher has no timer (an ack never waits past the input that made it), but keeps the machines'
contract: `next_deadline()` is None and `handle_timeout(now)` has nothing to send.

Invariant: an upstream broker's entries leave in the order they were asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidings.core.reliability.messages import ACK_ENTRIES_MAX, StreamAck, StreamAcks


@dataclass(frozen=True, slots=True)
class SendAck:
    """ACK `message` to the broker at `address`."""

    address: str
    message: StreamAcks


class AckBatcher:
    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: dict[str, list[StreamAck]] = {}  # upstream address -> its entries, in order

    def ack(self, upstream: str, tree: str, pubend: str, through: int, released: int, delivered: int) -> None:
        """Ask for an ack of stream (`tree`, `pubend`) to `upstream` with the ACK of this input."""
        self._pending.setdefault(upstream, []).append(StreamAck(tree, pubend, through, released, delivered))

    def __bool__(self) -> bool:
        return bool(self._pending)

    def drain(self) -> list[SendAck]:
        """The ACKs asked for since the last drain, one per upstream broker (split at the limit)."""
        pending, self._pending = self._pending, {}
        return [SendAck(address, StreamAcks(tuple(entries[i:i + ACK_ENTRIES_MAX])))
                for address, entries in pending.items() for i in range(0, len(entries), ACK_ENTRIES_MAX)]

    def next_deadline(self) -> int | None:
        return None

    def handle_timeout(self, now: int) -> list[SendAck]:
        return []


__all__ = ["AckBatcher", "SendAck"]
