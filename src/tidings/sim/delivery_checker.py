"""The overlay-wide delivery checker: what every subscriber that stayed connected must have received.

Theory of operation. It trusts nothing a broker says. From the publishers' own records (what each
sent, which ticks their ACKs gave, and when each ACK arrived) and the subscribers' own records (what
arrived, and when their SUBSCRIBED arrived) it recomputes the guarantee of docs/delivery.md for each
subscriber whose connection never broke:

- complete: every event acknowledged after the subscriber's SUBSCRIBED arrived, matching its
  pattern and filter (evaluated here with `pattern_matches` and a freshly parsed filter), was
  delivered;
- exactly once: no event was delivered twice;
- in publisher order: the events of each pubend arrived in increasing tick order;
- no phantom: every delivered event was acknowledged to its publisher at that tick, or is in its
  pubend's durable log at that tick (an event whose ACK a crash of the publisher's broker cut off:
  in doubt for the publisher, but logged), with the content that was published, and matches the
  subscription. The durable logs are the simulated disks' contents, not anything a broker says.

A durable subscriber (docs/durable.md) is checked the same way across all its connections, from
its first SUBSCRIBED: it reconnected, to other brokers too, with the token it kept, so everything
acknowledged after its start must have reached it once, in order, whatever broker it was on. So is
a roaming plain subscriber (sim/clients.py RoamingSubscriber): it resumes after what it received.

Gaps (the release protocol, docs/durable.md#release): a GAP names a pubend and a range of its ticks
that were released before the subscriber got them. With early release on, or after it resumed from
an older token than it had acknowledged (its own records then drop what followed that token, which
must come again), a durable subscriber may get one for an event it should have received: the event
then counts as covered, not missing (and it must not also arrive). Any other GAP that covers an
event the subscriber was promised (acked after its SUBSCRIBED, matching) is a problem: a subscriber
that stays connected and keeps up never gets a gap, and without early release neither does a
durable one.

Total-order subscribers of the same tree must also agree: the events any two of them both received
came in the same order at both.

Events acknowledged before SUBSCRIBED may or may not be delivered (the start point lies up to the
clock-skew allowance before it); if delivered, they are checked like the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tidings.core.channels import pattern_matches
from tidings.core.event import EventRecord
from tidings.core.filters import parse_filter
from tidings.core.multicast.trees import subscription_tree
from tidings.sim.clients import Publisher, Subscriber

REPORT_PER_KIND_MAX = 5
NEVER_ACKED = 2**63  # the "ack time" of a logged event whose ACK was lost: never required, allowed


def check_overlay_delivery(publishers: Sequence[Publisher], subscribers: Sequence[Subscriber],
                           durable_logs: Sequence[Sequence[tuple[int, bytes]]] = (),
                           early_release: bool = False) -> list[str]:
    published: dict[str, tuple[str, dict[str, Any], bytes, int, int]] = {}
    sent: dict[str, tuple[str, dict[str, Any], bytes]] = {}
    pubends: dict[str, str] = {}  # each event's pubend, as its ACK or its log record names it
    for pub in publishers:
        sent.update(pub.sent)
        pubends.update(pub.pubend_of)
        for ident, tick in pub.acked.items():
            channel, attributes, payload = pub.sent[ident]
            published[ident] = (channel, attributes, payload, tick, pub.acked_at[ident])
    for records in durable_logs:  # logged, though the ACK never reached the publisher
        for tick, record in records:
            fields = EventRecord.decode(record)
            ident = fields.payload.decode(errors="replace")
            if ident in sent and ident not in published and sent[ident] == (fields.channel, fields.attributes,
                                                                            fields.payload):
                published[ident] = (*sent[ident], tick, NEVER_ACKED)
                pubends[ident] = fields.pubend
    problems: list[str] = []
    for sub in subscribers:  # durable subscribers are checked across their reconnections
        if (sub.downs and not (sub.durable or sub.roams)) or sub.subscribed_at is None:
            continue
        gaps_allowed = sub.durable and (early_release or sub.rewound)
        problems += _check_one(sub, published, pubends, gaps_allowed)
    return problems + _check_total_order([s for s in subscribers if s.order == "total" and not s.downs])


def _check_total_order(subscribers: Sequence[Subscriber]) -> list[str]:
    problems: list[str] = []
    for i, a in enumerate(subscribers):
        for b in subscribers[i + 1:]:
            if subscription_tree(a.pattern) != subscription_tree(b.pattern):
                continue
            seq_a = [fields.payload for _, fields in a.received]
            seq_b = [fields.payload for _, fields in b.received]
            common = set(seq_a) & set(seq_b)
            order_a = [x for x in seq_a if x in common]
            order_b = [x for x in seq_b if x in common]
            if order_a != order_b:
                k = next(k for k, (x, y) in enumerate(zip(order_a, order_b, strict=True)) if x != y)
                problems.append(f"total order: {a.name} and {b.name} disagree at their common event {k}: "
                                f"{order_a[k]!r} against {order_b[k]!r}")
    return problems


def _check_one(sub: Subscriber, published: dict[str, tuple[str, dict[str, Any], bytes, int, int]],
               pubends: dict[str, str], gaps_allowed: bool) -> list[str]:
    flt = parse_filter(sub.filter) if sub.filter else None

    def gapped(ident: str, tick: int) -> bool:
        pubend = pubends.get(ident)
        return any(p == pubend and after < tick <= through for p, after, through, _ in sub.gaps)

    def matches(channel: str, attributes: dict[str, Any]) -> bool:
        return pattern_matches(sub.pattern, channel) and (flt is None or flt.matches(attributes))

    kinds: dict[str, list[str]] = {"duplicate": [], "phantom": [], "order": [], "missing": [], "gap": [],
                                   "delivered in a gap": []}
    seen: set[str] = set()
    last_tick: dict[str, int] = {}
    for tick, fields in sub.received:
        pubend, channel, attributes, payload = fields.pubend, fields.channel, fields.attributes, fields.payload
        ident = payload.decode(errors="replace")
        if ident in seen:
            kinds["duplicate"].append(f"{ident} at tick {tick}")
        seen.add(ident)
        entry = published.get(ident)
        if entry is None or entry[3] != tick or (channel, attributes, payload) != entry[:3] \
                or not matches(channel, attributes):
            kinds["phantom"].append(f"{ident} at tick {tick}")
        if gapped(ident, tick):
            kinds["delivered in a gap"].append(f"{ident} (tick {tick})")
        if tick <= last_tick.get(pubend, 0):
            kinds["order"].append(f"{ident} (tick {tick}) after tick {last_tick[pubend]} of {pubend}")
        last_tick[pubend] = max(tick, last_tick.get(pubend, 0))
    assert sub.subscribed_at is not None
    # a subscription that ended (quit) was promised nothing after: what was in flight may or may not come
    for ident, (channel, attributes, _, tick, acked_at) in sorted(published.items(), key=lambda kv: kv[1][3]):
        # the promise covers ticks after the start point: an event logged before it, whose ACK came
        # late (its publisher's broker crashed in between), may or may not come
        if acked_at > sub.subscribed_at and ident not in seen and matches(channel, attributes) \
                and sub.quit_at is None and (sub.start_tick is None or tick > sub.start_tick):
            if not gapped(ident, tick):
                kinds["missing"].append(f"{ident} (tick {tick})")
            elif not gaps_allowed:
                kinds["gap"].append(f"{ident} (tick {tick})")
    out = []
    for kind, items in kinds.items():
        if items:
            shown = ", ".join(items[:REPORT_PER_KIND_MAX])
            more = f" and {len(items) - REPORT_PER_KIND_MAX} more" if len(items) > REPORT_PER_KIND_MAX else ""
            out.append(f"{sub.name} ({sub.pattern!r} at {sub.address}): {len(items)} {kind}: {shown}{more}")
    return out

