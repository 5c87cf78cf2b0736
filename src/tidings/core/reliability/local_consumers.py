"""The local subscriptions and the PFS consumer on the tree streams: a machine beside them.

Theory of operation. A local subscription of a tree is one more consumer of the tree's streams
(istream.py), keyed by its subscription key, attached at its start (or, for the pubends its
checkpoint names, at those positions), in publisher order for other pubends' streams and in total
order, merged (merge.py), for all of them; its pattern and filter are part of the tree's interest.
A durable registration recorded in the persistent filtering subsystem makes the PFS consumer
(`PFS_CONSUMER`) one more consumer of every other pubend's stream of the tree, from where the local
subscriptions are, and keeps its interest in the tree's while its subscriber is away; a catchup
that asked the PFS which ticks it needs holds its stream's nacks until the answer.

`LocalConsumers` holds these rules and is the one writer of a tree's local part (`Tree.locals`,
`total`, `interests`, `positions`, `recorded`; tree.py), which the tree streams only read. The
reliability node reaches it for the subscription side's and the constream's inputs (a subscription
joins, leaves, blocks; a registration is recorded; the PFS answered) and carries out its typed
effects (`StreamEffect`: DeliverRecords, Lost, Recorded, SendToChild, nacks and summaries) as it
does the tree streams'; the acks they cause leave with the node's flush, as every input's do. It
uses the tree streams (`TreeStreams`, composed, not inherited) through their consumer hooks: the
tree's state (`tree`), its interest once its consumers changed (`resummarize`), a
stream's push and ack after a consumer moved (`serve`) and the drop of a tree nothing needs
(`drop_if_unused`).

Why here and not in core/subscription/: these rules move the streams' consumers (attach, detach,
blocked, the PFS waits, sparse silence), which are the reliability layer's state, and the PFS
consumer is a durable registration's, not a subscription's; the subscription side reaches them
through the node's `local_subscribe`, `local_unsubscribe`, `local_flow`, `delivered_through` and
`lag`, as before.
"""

from __future__ import annotations

from tidings.core.durable.constream import READ_WAIT_NS, Catchup
from tidings.core.event import TICK_MAX
from tidings.core.reliability.effects import StreamEffect
from tidings.core.reliability.summary import of_subscription
from tidings.core.reliability.tree import PFS_CONSUMER
from tidings.core.reliability.tree_streams import TreeStreams


class LocalConsumers:
    __slots__ = ("_streams",)

    def __init__(self, streams: TreeStreams) -> None:
        self._streams = streams

    # ---- local subscriptions --------------------------------------------------------------------

    def local_subscribe(self, now: int, key: int, tree: str, start: int, total: bool = False,
                        pattern: str = "#", filter_text: str = "",
                        positions: dict[str, int] | None = None) -> list[StreamEffect]:
        """A local subscription of `tree` wants other pubends' ticks after `start` (or after
        `positions[pubend]` for the pubends named: a durable subscription's checkpoint) that match
        `pattern` and `filter_text`; in total order (`total`) its own pubend's too, merged with the
        rest (merge.py)."""
        streams = self._streams
        t = streams.tree(tree)
        t.locals[key] = start
        t.set_own(key, of_subscription(pattern, filter_text, streams.summary_bytes_max))
        if positions:
            t.positions[key] = dict(positions)
        if total:
            t.total[key] = start
        wants_from = {pubend: t.start_of(key, pubend, start) for pubend in t.istreams}
        out = streams.resummarize(now, tree, t, wants_from, min([start, *(positions or {}).values()]))
        for pubend, ist in t.istreams.items():
            if t.wants(key, pubend, streams.pubend_id):
                ist.attach(key, t.start_of(key, pubend, start))
                out += streams.serve(now, t, ist)
        return out

    def local_unsubscribe(self, now: int, key: int, tree: str) -> list[StreamEffect]:
        streams = self._streams
        t = streams.trees.get(tree)
        if t is None:
            return []
        t.locals.pop(key, None)
        t.total.pop(key, None)
        t.drop_own(key)
        t.positions.pop(key, None)
        for ist in t.istreams.values():
            ist.detach(key)
            streams.serve(now, t, ist, push=False)
        out = streams.resummarize(now, tree, t, {}, TICK_MAX)
        out += streams.drop_if_unused(tree, t)
        return out

    # ---- the persistent filtering subsystem's consumer (constream.py) -------------------------------

    def record(self, now: int, tree: str, registration: int, pattern: str,
               filter_text: str) -> list[StreamEffect]:
        """Durable registration `registration` of `tree` is recorded in the PFS from now on: the
        tree's streams get the PFS consumer (from where they are), and its interest stays in the
        tree's while its subscriber is away."""
        streams = self._streams
        t = streams.tree(tree)
        first = not t.recorded
        t.set_own(registration, of_subscription(pattern, filter_text, streams.summary_bytes_max), recorded=True)
        wants_from: dict[str, int] = {}
        if first:  # from where the local subscriptions are (the new durable one's start among them)
            for pubend, ist in t.istreams.items():
                if pubend != streams.pubend_id:
                    start = min([ist.horizon, *(c.sent_through for k, c in ist.consumers.items() if type(k) is int)])
                    wants_from[pubend] = ist.attach(PFS_CONSUMER, start).sent_through
        out = streams.resummarize(now, tree, t, wants_from, min(wants_from.values(), default=TICK_MAX))
        for ist in t.istreams.values():
            out += streams.serve(now, t, ist)
        return out

    def unrecord(self, now: int, tree: str, registration: int) -> list[StreamEffect]:
        """Registration `registration` of `tree` ended: it is no longer recorded (nor of interest)."""
        streams = self._streams
        t = streams.trees.get(tree)
        if t is None or registration not in t.recorded:
            return []
        t.drop_own(registration, recorded=True)
        if not t.recorded:
            for ist in t.istreams.values():
                ist.detach(PFS_CONSUMER)
                streams.serve(now, t, ist, push=False)
        out = streams.resummarize(now, tree, t, {}, TICK_MAX)
        out += streams.drop_if_unused(tree, t)
        return out

    def await_pfs(self, now: int, span: Catchup) -> None:
        """The catchup `span.key` asked the PFS which ticks of `span` it needs: its stream nacks
        nothing up to `span.through` until the answer (`pfs_answered`), or READ_WAIT_NS."""
        t = self._streams.trees.get(span.tree)
        ist = None if t is None else t.istreams.get(span.pubend)
        if ist is not None and span.key in ist.consumers:
            ist.waiting[span.key] = (span.through, now + READ_WAIT_NS)
            self._streams.curiosity.wake(span.tree, span.pubend, now + READ_WAIT_NS)

    def pfs_answered(self, now: int, span: Catchup,
                     answer: Catchup | None) -> tuple[int, list[StreamEffect]]:
        """The PFS answered the catchup waiting on `span`: of its range it needs only the matched
        ticks (Istream.sparsen), or, with no `answer`, all of them. Returns how many ticks it no
        longer fetches, and the effects (its nacks go now)."""
        t = self._streams.trees.get(span.tree)
        ist = None if t is None else t.istreams.get(span.pubend)
        if t is None or ist is None or ist.waiting.pop(span.key, None) is None:
            return 0, []
        silenced = 0 if answer is None else ist.sparsen(answer.key, answer.after, answer.through, answer.ticks)
        return silenced, self._streams.serve(now, t, ist)

    def local_flow(self, now: int, key: int, tree: str, blocked: bool) -> list[StreamEffect]:
        t = self._streams.trees.get(tree)
        if t is None:
            return []
        out: list[StreamEffect] = []
        for ist in t.istreams.values():
            consumer = ist.consumers.get(key)
            if consumer is not None and consumer.blocked != blocked:
                consumer.blocked = blocked
                out += self._streams.serve(now, t, ist, push=not blocked)
        return out

    def delivered_through(self, key: int, tree: str) -> dict[str, int]:
        """For local subscription `key`: per pubend of `tree`, the tick up to which every event was
        handed to the broker for it (delivered, or found not to match): its checkpoint's entries."""
        t = self._streams.trees.get(tree)
        if t is None:
            return {}
        out: dict[str, int] = {}
        for pubend, ist in t.istreams.items():
            consumer = ist.consumers.get(key)
            if consumer is not None and key not in t.total:
                out[pubend] = consumer.sent_through
        return out

    def lag(self, key: int, tree: str) -> dict[str, int]:
        """For local subscription `key`: per pubend of `tree`, how many ticks the stream knows of
        (its highest known tick) that have not been handed to the subscription yet."""
        t = self._streams.trees.get(tree)
        if t is None:
            return {}
        return {pubend: max(0, ist.top - consumer.sent_through) for pubend, ist in t.istreams.items()
                if (consumer := ist.consumers.get(key)) is not None}


__all__ = ["LocalConsumers"]
