"""Where a new subscription starts, and whether this connection may open it.

Theory of operation. A SUBSCRIBE names its start: now (START_NOW: the durable tail), the oldest
retained event (START_OLDEST: wherever the log now begins, released ticks skipped without a GAP) or
after a tick (START_AFTER). This broker's own pubend's events are given from that position exactly.
Other pubends' ticks come from other clocks, which may differ from this broker's by up to the clock
skew allowance: a subscription that starts now takes every other pubend's tick after the present
less that allowance (whatever of them it gets twice across a move, its client drops), one that
starts at a tick takes theirs after the same tick. A bounded subscription (`end`) reads up to its end
or the durable tail, whichever is lower, and never goes live. A durable one's checkpoint token then
overrides these per pubend (core/durable/subscriptions.py).

Its pattern and filter are checked and parsed here too: a SUBSCRIBE that fails any check is refused
with the reason, and nothing is opened.

A READ is a bounded subscription answered in bulk: `from_read` turns it into its SUBSCRIBE.

Total order (one interleaving per tree, merged by the reliability node) starts now and has no end,
and needs the broker to be in an overlay: the merge is the trees'.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import NamedTuple

from tidings.core import errors
from tidings.core.channels import validate_pattern
from tidings.core.errors import TidingsError
from tidings.core.filters import Filter, parse_filter
from tidings.core.wire import messages


class Start(NamedTuple):
    position: int  # this broker's own pubend: every tick after it, exactly
    remote: int  # other pubends: every tick after it
    end: int | None  # the last tick of a bounded subscription
    from_oldest: bool  # its first read skips what the log released, without a GAP


def resolve_start(msg: messages.Subscribe, synced_tick: int, released_through: int, wall_us: int,
            clock_skew_allowance_ns: int) -> Start:
    """Where subscription `msg` starts, with this broker's log durable through `synced_tick` and
    released through `released_through`, at wall clock `wall_us`."""
    if msg.start == messages.START_NOW:
        position = synced_tick
        remote = max(0, wall_us - clock_skew_allowance_ns // 1000)
    else:
        position = released_through if msg.start == messages.START_OLDEST else msg.after
        remote = position
    end = None if msg.end is None else min(msg.end, synced_tick)
    return Start(position, remote, end, msg.start == messages.START_OLDEST)


def check_subscribe(msg: messages.Subscribe, open_subs: Collection[int], subscriptions_max: int,
          in_overlay: bool) -> tuple[str, Filter | None]:
    """The pattern and the parsed filter of `msg`; TidingsError when a connection holding
    `open_subs` (client ids) may not open it, or they do not parse."""
    if msg.sub in open_subs:
        raise TidingsError(f"subscription {msg.sub} already exists", errors.SUBSCRIPTION_EXISTS)
    if len(open_subs) >= subscriptions_max:
        raise TidingsError("subscriptions_per_connection_max reached", errors.TOO_MANY_SUBSCRIPTIONS)
    if msg.order == messages.ORDER_TOTAL:
        if msg.start != messages.START_NOW or msg.end is not None:
            raise TidingsError("a total-order subscription starts now and has no end", errors.BAD_START)
        if not in_overlay:
            raise TidingsError("total order needs the broker to be in an overlay", errors.BAD_START)
    return validate_pattern(msg.pattern), parse_filter(msg.filter) if msg.filter else None


def from_read(msg: messages.Read) -> messages.Subscribe:
    """The bounded SUBSCRIBE a READ is: its ticks (after, end] of this broker's own pubend."""
    return messages.Subscribe(msg.sub, msg.pattern, msg.filter, messages.START_AFTER, msg.after, msg.end)
