"""The streaming query's driver and the brokers it talks to: which one, and how it moves on when
that one is lost.

Theory of operation. The driver needs a broker for two things: to walk the overlay at each trigger
(planning) and to hold the query's durable subscription (pinning the start, taking each commit's
release). Neither is tied to one broker. The query's position is its offset, a checkpoint token's
vector that means the same on every broker, and each event is read at the broker that logged it.
So when the named broker (`broker`) is lost, the driver moves on:

- **Entries.** The brokers it may start from, in order: `broker`, the `brokers` option, then every
  broker this driver has seen log a pubend. Planning walks the overlay from the first that answers
  (`survey_any`); the named broker is tried first again 30 s after it last failed to answer, so
  the query goes back to it when it is back.
- **The durable subscription** is named `durableName` at whichever broker holds it. The start is
  pinned at the first entry that answers (`pin`). Each commit acknowledges at the first entry that
  answers (`release`): where the subscription did not exist yet it is created there, at the
  commit's position, and acknowledged. A broker the subscription was held at meanwhile keeps
  holding events until told otherwise, so once the named broker is back and acknowledged, the
  other holders are ended (`forget`). The broker that held it when it was lost still counts it for
  `release_hold_ns` (5 minutes) at its last acknowledgement, so nothing the query needs is released
  while it moves; and anything released before the query read it is found at planning as any loss
  is (failOnDataLoss).

Connections are opened and closed inside each call: the driver keeps plain data only, since
Spark pickles the reader to the executors. Log lines go to the logger `tidings.spark`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tidings.core import errors
from tidings.core.durable.checkpoint import Checkpoint
from tidings.core.errors import TidingsError
from tidings.spark.offsets import Offset
from tidings.spark.options import StreamOptions
from tidings.spark.overlay import Connect, Survey, Unreachable, survey
from tidings.spark.planning import ReadError
from tidings.spark.reading import TRANSIENT

logger = logging.getLogger("tidings.spark")

REGISTRATION_BUSY_S_MAX = 10.0  # the broker may still hold our previous connection's use of the name
REGISTRATION_RETRY_S = 0.1
UNREACHABLE = TRANSIENT  # an entry that cannot serve: try the next (a refusal is the user's to see)
ENTRY_DEMOTED_NS = 30 * 10**9  # a broker that did not answer is tried after the others for this long


class NoBrokerError(ReadError):
    """No broker the query may start from answers."""

    code = errors.UNREACHABLE


@dataclass
class Entries:
    """The brokers to try, in order: the named one, the `brokers` option, those learned (seen
    logging a pubend). One that did not answer goes after the others for ENTRY_DEMOTED_NS: a
    crashed host costs a connection timeout at each try, not a refusal."""

    learned: set[str] = field(default_factory=set)
    failed_ns: dict[str, int] = field(default_factory=dict)  # address -> when it last did not answer
    clock: Callable[[], int] = time.monotonic_ns

    def order(self, opts: StreamOptions) -> list[str]:
        now = self.clock()
        every = list(dict.fromkeys([opts.broker, *opts.failover, *sorted(self.learned)]))
        demoted = {a for a, at in self.failed_ns.items() if now - at < ENTRY_DEMOTED_NS}
        return [a for a in every if a not in demoted] + [a for a in every if a in demoted]


def _at(opts: StreamOptions, address: str) -> StreamOptions:
    return opts if address == opts.broker else dataclasses.replace(opts, broker=address)


def first_answering(opts: StreamOptions, entries: Entries | None, call: Callable[[StreamOptions], Any],
                    what: str) -> Any:
    """`call` with the options pointed at the first entry for which it does not fail with an
    unreachable broker; NoBrokerError naming them all otherwise."""
    entries = entries or Entries()
    errors = []
    for address in entries.order(opts):
        try:
            answer = call(_at(opts, address))
        except UNREACHABLE as exc:
            errors.append(f"{address}: {exc}")
            entries.failed_ns[address] = entries.clock()
            continue
        entries.failed_ns.pop(address, None)
        return answer
    raise NoBrokerError(f"tidings stream of {opts.pattern!r}: no broker answers to {what} "
                        f"({'; '.join(errors)}); give more brokers of the overlay with .option(\"brokers\", "
                        '"host:port,host:port")')


def survey_any(opts: StreamOptions, connect_to: Connect, entries: Entries | None, unreachable: Unreachable) -> Survey:
    """Every pubend of the overlay, walked from the first entry that answers: those reached, and
    those the pubend directory lists that were not."""
    found: Survey = first_answering(opts, entries, lambda o: survey(o, connect_to, unreachable),
                                    "plan the micro-batch")
    return found


@contextlib.contextmanager
def registration(opts: StreamOptions, create_at: int, connect_to: Connect,
                 end_it: bool = False) -> Iterator[tuple[Any, Any]]:
    """(client, subscription) of the query's named durable subscription at `opts.broker`, created
    after tick `create_at` if it does not exist; closed on exit: away, still holding, or ended for
    good (`end_it`)."""
    deadline = time.monotonic() + REGISTRATION_BUSY_S_MAX
    with connect_to(opts, opts.broker, "registration") as client:
        while True:
            try:
                sub = client.subscribe(opts.pattern, filter=opts.filter, start=create_at, durable=opts.durable_name)
                break
            except TidingsError as exc:  # "in use by another connection": our last one, closing
                if "in use" not in str(exc) or time.monotonic() > deadline:
                    raise
            time.sleep(REGISTRATION_RETRY_S)
        try:
            yield client, sub
        finally:
            sub.close(forget=end_it)


def pin(opts: StreamOptions, want: Offset, connect_to: Connect, entries: Entries | None = None) -> tuple[Offset, str]:
    """The query's start, and the broker that holds it: `want` when this call creates its durable
    subscription, else the subscription's position (the start pinned by an earlier call, or the
    last commit)."""
    def at(o: StreamOptions) -> tuple[Offset, str]:
        with registration(o, want.default, connect_to) as (client, sub):
            held = Checkpoint.decode(sub.token)
            if held.default == want.default and held.positions == {client.pubend: want.default}:
                sub.ack(want.token())  # new: it holds from `want` on
                return want, o.broker
            return Offset.from_checkpoint(held), o.broker

    return first_answering(opts, entries, at, "hold the durable subscription")  # type: ignore[no-any-return]


def release(opts: StreamOptions, end: Offset, connect_to: Connect, entries: Entries | None = None,
            homes: set[str] | None = None) -> str:
    """Acknowledge `end` to the query's durable subscription (only ever forward) at the first entry
    that answers, and return it. `homes` (updated) are the brokers that hold the subscription for
    this driver: once the named broker took the acknowledgement, the others are ended."""
    def at(o: StreamOptions) -> str:
        with registration(o, end.default, connect_to) as (_client, sub):
            sub.ack(end.token())
        return o.broker

    home = first_answering(opts, entries, at, "take the commit")
    if homes is None:
        return home  # type: ignore[no-any-return]
    if home != opts.broker:
        homes.add(home)
        return home  # type: ignore[no-any-return]
    for other in sorted(homes - {home}):
        if forget(_at(opts, other), end, connect_to):
            homes.discard(other)
            logger.warning("tidings stream of %r: the durable subscription %r is back at %s; ended the one held at "
                           "%s meanwhile", opts.pattern, opts.durable_name, home, other)
    return home  # type: ignore[no-any-return]


def forget(opts: StreamOptions, end: Offset, connect_to: Connect) -> bool:
    """End the query's durable subscription at `opts.broker` (it holds events for the query no
    more); False if that broker cannot be reached now."""
    try:
        with registration(opts, end.default, connect_to, end_it=True):
            pass
    except UNREACHABLE as exc:
        logger.info("tidings stream of %r: durable subscription %r at %s not ended yet (%s)", opts.pattern,
                    opts.durable_name, opts.broker, exc)
        return False
    return True
