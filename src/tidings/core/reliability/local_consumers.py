"""The local subscriptions' and the PFS consumer's side of the tree streams, moved as they were.

Theory of operation. A local subscription of a tree is one more consumer of the tree's streams
(istream.py), keyed by its subscription key, attached at its start (or, for the pubends its
checkpoint names, at those positions), in publisher order for other pubends' streams and in total
order, merged (merge.py), for all of them; its pattern and filter are part of the tree's interest.
A durable registration recorded in the persistent filtering subsystem makes the PFS consumer
(`PFS_CONSUMER`) one more consumer of every other pubend's stream of the tree, from where the local
subscriptions are, and keeps its interest in the tree's while its subscriber is away; a catchup
that asked the PFS which ticks it needs holds its stream's nacks until the answer.

These rules are the tree streams' (`TreeStreams` mixes this class in) and are kept here unchanged,
for the `Subscription` machine (core/subscription/) to take over; the acks they cause leave with the
reliability node's flush, as every input's do.
"""

from __future__ import annotations

from typing import Protocol

from tidings.core.durable.constream import READ_WAIT_NS, Catchup
from tidings.core.event import TICK_MAX
from tidings.core.reliability.curiosity import Curiosity
from tidings.core.reliability.effects import StreamEffect
from tidings.core.reliability.istream import Istream
from tidings.core.reliability.summary import of_subscription
from tidings.core.reliability.tree import PFS_CONSUMER, Tree


class _Streams(Protocol):
    """What these rules use of the tree streams."""

    trees: dict[str, Tree]
    pubend_id: str
    summary_bytes_max: int
    curiosity: Curiosity

    def _new_tree(self, tree: str) -> Tree: ...

    def _istream(self, tree: str, pubend: str) -> Istream | None: ...

    def _resummarize(self, now: int, tree: str, t: Tree, positions: dict[str, int],
                     since: int) -> list[StreamEffect]: ...

    def _push(self, now: int, t: Tree, ist: Istream) -> list[StreamEffect]: ...

    def _after_change(self, now: int, ist: Istream) -> None: ...

    def _drop_if_unused(self, tree: str, t: Tree) -> list[StreamEffect]: ...


class LocalConsumers:
    # ---- local subscriptions --------------------------------------------------------------------

    def local_subscribe(self: _Streams, now: int, key: int, tree: str, start: int, total: bool = False,
                        pattern: str = "#", filter_text: str = "",
                        positions: dict[str, int] | None = None) -> list[StreamEffect]:
        """A local subscription of `tree` wants other pubends' ticks after `start` (or after
        `positions[pubend]` for the pubends named: a durable subscription's checkpoint) that match
        `pattern` and `filter_text`; in total order (`total`) its own pubend's too, merged with the
        rest (see `_merge`)."""
        t = self.trees.get(tree)
        if t is None:
            t = self.trees[tree] = self._new_tree(tree)
        t.locals[key] = start
        t.interests[key] = of_subscription(pattern, filter_text, self.summary_bytes_max)
        if positions:
            t.positions[key] = dict(positions)
        if total:
            t.total[key] = start
        wants_from = {pubend: t.start_of(key, pubend, start) for pubend in t.istreams}
        out = self._resummarize(now, tree, t, wants_from, min([start, *(positions or {}).values()]))
        for pubend, ist in t.istreams.items():
            if t.wants(key, pubend, self.pubend_id):
                ist.attach(key, t.start_of(key, pubend, start))
                out += self._push(now, t, ist)
                self._after_change(now, ist)
        return out

    def local_unsubscribe(self: _Streams, now: int, key: int, tree: str) -> list[StreamEffect]:
        t = self.trees.get(tree)
        if t is None:
            return []
        t.locals.pop(key, None)
        t.total.pop(key, None)
        t.interests.pop(key, None)
        t.positions.pop(key, None)
        for ist in t.istreams.values():
            ist.detach(key)
            self._after_change(now, ist)
        out = self._resummarize(now, tree, t, {}, TICK_MAX)
        out += self._drop_if_unused(tree, t)
        return out

    # ---- the persistent filtering subsystem's consumer (constream.py) -------------------------------

    def record(self: _Streams, now: int, tree: str, registration: int, pattern: str,
               filter_text: str) -> list[StreamEffect]:
        """Durable registration `registration` of `tree` is recorded in the PFS from now on: the
        tree's streams get the PFS consumer (from where they are), and its interest stays in the
        tree's while its subscriber is away."""
        t = self.trees.get(tree)
        if t is None:
            t = self.trees[tree] = self._new_tree(tree)
        first = not t.recorded
        t.recorded[registration] = of_subscription(pattern, filter_text, self.summary_bytes_max)
        wants_from: dict[str, int] = {}
        if first:  # from where the local subscriptions are (the new durable one's start among them)
            for pubend, ist in t.istreams.items():
                if pubend != self.pubend_id:
                    start = min([ist.horizon, *(c.sent_through for k, c in ist.consumers.items() if type(k) is int)])
                    wants_from[pubend] = ist.attach(PFS_CONSUMER, start).sent_through
        out = self._resummarize(now, tree, t, wants_from, min(wants_from.values(), default=TICK_MAX))
        for ist in t.istreams.values():
            out += self._push(now, t, ist)
            self._after_change(now, ist)
        return out

    def unrecord(self: _Streams, now: int, tree: str, registration: int) -> list[StreamEffect]:
        """Registration `registration` of `tree` ended: it is no longer recorded (nor of interest)."""
        t = self.trees.get(tree)
        if t is None or registration not in t.recorded:
            return []
        del t.recorded[registration]
        if not t.recorded:
            for ist in t.istreams.values():
                ist.detach(PFS_CONSUMER)
                self._after_change(now, ist)
        out = self._resummarize(now, tree, t, {}, TICK_MAX)
        out += self._drop_if_unused(tree, t)
        return out

    def await_pfs(self: _Streams, now: int, span: Catchup) -> None:
        """The catchup `span.key` asked the PFS which ticks of `span` it needs: its stream nacks
        nothing up to `span.through` until the answer (`pfs_answered`), or READ_WAIT_NS."""
        ist = self._istream(span.tree, span.pubend)
        if ist is not None and span.key in ist.consumers:
            ist.waiting[span.key] = (span.through, now + READ_WAIT_NS)
            self.curiosity.wake(span.tree, span.pubend, now + READ_WAIT_NS)

    def pfs_answered(self: _Streams, now: int, span: Catchup,
                     answer: Catchup | None) -> tuple[int, list[StreamEffect]]:
        """The PFS answered the catchup waiting on `span`: of its range it needs only the matched
        ticks (Istream.sparsen), or, with no `answer`, all of them. Returns how many ticks it no
        longer fetches, and the effects (its nacks go now)."""
        t = self.trees.get(span.tree)
        ist = None if t is None else t.istreams.get(span.pubend)
        if t is None or ist is None or ist.waiting.pop(span.key, None) is None:
            return 0, []
        silenced = 0 if answer is None else ist.sparsen(answer.key, answer.after, answer.through, answer.ticks)
        out = self._push(now, t, ist)
        self._after_change(now, ist)
        return silenced, out

    def local_flow(self: _Streams, now: int, key: int, tree: str, blocked: bool) -> list[StreamEffect]:
        t = self.trees.get(tree)
        if t is None:
            return []
        out: list[StreamEffect] = []
        for ist in t.istreams.values():
            consumer = ist.consumers.get(key)
            if consumer is not None and consumer.blocked != blocked:
                consumer.blocked = blocked
                if not blocked:
                    out += self._push(now, t, ist)
                self._after_change(now, ist)
        return out

    def delivered_through(self: _Streams, key: int, tree: str) -> dict[str, int]:
        """For local subscription `key`: per pubend of `tree`, the tick up to which every event was
        handed to the broker for it (delivered, or found not to match): its checkpoint's entries."""
        t = self.trees.get(tree)
        if t is None:
            return {}
        out: dict[str, int] = {}
        for pubend, ist in t.istreams.items():
            consumer = ist.consumers.get(key)
            if consumer is not None and key not in t.total:
                out[pubend] = consumer.sent_through
        return out

    def lag(self: _Streams, key: int, tree: str) -> dict[str, int]:
        """For local subscription `key`: per pubend of `tree`, how many ticks the stream knows of
        (its highest known tick) that have not been handed to the subscription yet."""
        t = self.trees.get(tree)
        if t is None:
            return {}
        return {pubend: max(0, ist.top - consumer.sent_through) for pubend, ist in t.istreams.items()
                if (consumer := ist.consumers.get(key)) is not None}


__all__ = ["LocalConsumers"]
