"""The release protocol: when a pubend's log may drop a prefix of its stream (Gryphon durable §3).

Theory of operation. A pubend's log is the only stable copy of its events, so it keeps an event
until everyone who may still want it has it. Two values per pubend p decide:

- Td(p), latestDelivered: the tick through which every subscriber that is connected and keeping up
  has been given the stream. It is the stream's ack point, which the trees already carry: a
  broker acknowledges a tick once every consumer below it (children, local subscriptions) has it.
- Tr(p), released: the tick through which every durable subscription has consumed and acknowledged
  the stream, connected or not. A subscriber's broker holds, per durable subscription it hosts,
  what the application acknowledged (`sub.ack`, core/durable/registrations.py); each broker on a tree sends
  up, beside its ack point, the smallest of its own durable subscriptions' releases and its
  children's (never above its ack point); the root sends that to the pubend's broker with its ACK.
  A child that left the tree holds its last value for `release_hold_ns`, and one that has not
  acked yet holds 0, so neither a failing forwarder nor a repair can release what brokers below
  still hold. The pubend takes the smallest over the trees it publishes on, and over its own
  broker's durable subscriptions (its own events reach those from its log, not through a tree).

A tick t becomes L (released) when t <= Tr(p), or early, when t <= Td(p) and the pubend's time is
more than `max_retain` past it (the paper's PHB-controlled policy): a durable subscriber away for
longer than that may get a gap, while subscribers that are connected and keeping up never do,
since nothing past Td(p) is ever released early. The log then drops whole segments at or below the
released prefix once they are also older than `release_keep` (kept meanwhile for replays that no
durable subscription protects: `--from`, Spark batch reads). The operator's size and age caps of
the log stay hard caps above all this; what they remove is answered as L too, so a subscriber
that needed it gets an explicit gap, never a silent skip.

The decision is made here, in the core, and leaves as an effect (ReleaseLog) that the runtime and
the simulator apply alike.
"""

from __future__ import annotations

TICKS_PER_US = 1  # ticks follow the wall clock in microseconds (pubend.py)


def release_through(released: int, delivered: int, synced: int, wall_us: int, max_retain_us: int,
                    keep_us: int) -> int:
    """The tick through which the pubend's log may drop its prefix now: L is everything up to
    Tr = `released`, or up to Td = `delivered` where older than `max_retain_us`, never past the
    durable tail `synced`; of that, what is older than `keep_us`."""
    lost = max(released, min(delivered, wall_us - max_retain_us * TICKS_PER_US))
    return max(0, min(lost, synced, wall_us - keep_us * TICKS_PER_US))
