"""The checker: what every run must satisfy, computed from the durable log and the clients' records.

Theory of operation. The checker trusts nothing the broker says about itself. It takes the durable
log (what the disk holds after the last crash, or at the end) and what each client recorded, and
recomputes the expected outcome independently: matching uses `pattern_matches` and a freshly parsed
`Filter`, never the broker's subscription index. It checks:

(a) acknowledged is durable: every event a publisher saw ACKed is in the log exactly once, at the
    ACKed tick, with the content that was published and the publisher's source; events the broker
    rejected are not in the log; the log's ticks strictly increase;
(b) exactly-once delivery: each subscriber received, in tick order, every durable event matching
    its pattern and filter with a tick in its interval (after its first SUBSCRIBED position, up to
    the durable tail), each exactly once: no duplicate, no gap, nothing extra;
(c) no phantom: every delivered event is in the durable log, byte for byte the logged record.

(b) holds only once the run has quiesced (everything published has been delivered); (a) and (c)
hold at every crash. Each check returns a list of violations (readable sentences, the first few
per kind), empty when all is well.
"""

from __future__ import annotations

from collections.abc import Sequence

from tidings.core.channels import pattern_matches
from tidings.core.event import EventRecord
from tidings.core.filters import parse_filter
from tidings.sim.clients import Publisher, Subscriber

REPORT_PER_CHECK_MAX = 5

LogEntry = tuple[int, EventRecord]  # tick, decoded record


def decode_log(records: Sequence[tuple[int, bytes]]) -> list[LogEntry]:
    return [(tick, EventRecord.decode(record)) for tick, record in records]


def _capped(problems: list[str], what: str) -> list[str]:
    if len(problems) <= REPORT_PER_CHECK_MAX:
        return problems
    return [*problems[:REPORT_PER_CHECK_MAX], f"... and {len(problems) - REPORT_PER_CHECK_MAX} more {what}"]


def check_log_order(log: list[LogEntry]) -> list[str]:
    problems = []
    previous = 0
    for tick, fields in log:
        if tick <= previous:
            problems.append(f"log: tick {tick} follows {previous}")
        if fields.tick != tick:
            problems.append(f"log: record at tick {tick} says tick {fields.tick}")
        previous = tick
    return _capped(problems, "log order problems")


def check_acked_durable(publishers: Sequence[Publisher], log: list[LogEntry]) -> list[str]:
    """(a): ACKed events are in the log exactly once, as published; rejected ones are absent."""
    by_payload: dict[bytes, list[LogEntry]] = {}
    for entry in log:
        by_payload.setdefault(entry[1].payload, []).append(entry)
    problems = []
    for pub in publishers:
        for ident, tick in pub.acked.items():
            found = by_payload.get(ident.encode(), [])
            if len(found) != 1:
                problems.append(f"{ident} ACKed at tick {tick} is in the durable log {len(found)} times")
                continue
            log_tick, fields = found[0]
            channel, attributes, payload = pub.sent[ident]
            if log_tick != tick:
                problems.append(f"{ident} ACKed at tick {tick} is logged at tick {log_tick}")
            logged = (fields.channel, fields.attributes, fields.service, fields.instance, fields.payload)
            if logged != (channel, attributes, "sim", pub.name, payload):
                problems.append(f"{ident} is logged as {logged!r}")
        for ident in pub.rejected:
            if ident.encode() in by_payload:
                problems.append(f"{ident} was rejected but is in the log")
    return _capped(problems, "acknowledgement problems")


def expected_for(sub: Subscriber, log: list[LogEntry]) -> list[LogEntry]:
    """The durable events `sub` must receive: its interval, its pattern, its filter."""
    assert sub.interval_start is not None
    flt = parse_filter(sub.filter) if sub.filter else None
    return [
        (tick, fields) for tick, fields in log
        if tick > sub.interval_start and pattern_matches(sub.pattern, fields.channel)
        and (flt is None or flt.matches(fields.attributes))
    ]


def check_no_phantoms(subscribers: Sequence[Subscriber], log: list[LogEntry]) -> list[str]:
    """(c): everything delivered is in the durable log, identical to the logged record."""
    by_tick = dict(log)
    problems = []
    for sub in subscribers:
        for tick, fields in sub.received:
            logged = by_tick.get(tick)
            if logged is None:
                problems.append(f"{sub.name} received tick {tick}, which is not in the durable log")
            elif logged != fields:
                problems.append(f"{sub.name} received tick {tick} as {fields!r}, the log holds {logged!r}")
    return _capped(problems, "phantom deliveries")


def check_delivery(sub: Subscriber, log: list[LogEntry]) -> list[str]:
    """(b): exactly the expected events, once each, in tick order."""
    if sub.interval_start is None:
        return [f"{sub.name} was never subscribed"]
    expected = expected_for(sub, log)
    got = [tick for tick, _ in sub.received]
    want = [tick for tick, _ in expected]
    if got == want:
        return []
    problems = []
    seen: set[int] = set()
    previous = sub.interval_start
    for tick in got:
        if tick in seen:
            problems.append(f"{sub.name} received tick {tick} twice")
        elif tick <= previous:
            problems.append(f"{sub.name} received tick {tick} after {previous}")
        seen.add(tick)
        previous = max(previous, tick)
    wanted = set(want)
    missing = [t for t in want if t not in seen]
    extra = sorted(t for t in seen if t not in wanted)
    if missing:
        problems.append(f"{sub.name} ({sub.pattern!r}, {sub.filter!r}, after {sub.interval_start}) "
                        f"missed {len(missing)} of {len(want)} events, first {missing[:5]}")
    if extra:
        problems.append(f"{sub.name} received {len(extra)} events it should not have, first {extra[:5]}")
    return _capped(problems or [f"{sub.name}: delivery differs from the expected sequence"],
                   "delivery problems")


def check_run(publishers: Sequence[Publisher], subscribers: Sequence[Subscriber],
              durable: Sequence[tuple[int, bytes]], quiesced: bool = True) -> list[str]:
    """Every check; (b) only when the run quiesced."""
    log = decode_log(durable)
    problems = check_log_order(log) + check_acked_durable(publishers, log)
    problems += check_no_phantoms(subscribers, log)
    for client in [*publishers, *subscribers]:
        problems += client.violations
    if quiesced:
        for sub in subscribers:
            problems += check_delivery(sub, log)
    return problems
