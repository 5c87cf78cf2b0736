"""The composer of Pastry and Scribe under untrusted peer messages.

Whatever a peer sends, `ClusterMember.received` either handles it or raises a TidingsError (which
the broker answers with an error and a closed link); it never raises anything else, and the node
goes on routing correctly afterwards.
"""

from __future__ import annotations

import contextlib
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tidings.core.cluster import ClusterMember
from tidings.core.errors import TidingsError
from tidings.core.multicast.agent import ScribeConfig
from tidings.core.overlay.envelope import Deliver
from tidings.core.overlay.node import OverlayConfig
from tidings.core.overlay.node_id import NodeRef, id_to_wire

ME = NodeRef(7 << 120, "127.0.0.1:7400")

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**64), 2**64), st.text(max_size=8),
                    st.binary(max_size=20), st.just(id_to_wire(5)), st.just(ME.to_wire()))
values = st.recursive(scalars, lambda c: st.lists(c, max_size=5), max_leaves=16)
raw = st.tuples(st.integers(60, 110), st.lists(values, max_size=6)).map(lambda t: [t[0], *t[1]])
# well-formed ROUTE envelopes whose payload is junk for Scribe: the path into its upcalls
routes = st.tuples(st.integers(0, 2**128 - 1), st.integers(0, 50), raw).map(
    lambda t: [64, id_to_wire(t[0]), [id_to_wire(9), "127.0.0.1:9"], t[1], t[2]])
messages = st.one_of(raw, routes)


def member() -> ClusterMember:
    m = ClusterMember(ME, OverlayConfig(), ScribeConfig(), random.Random(1))
    m.start(0, None)
    return m


@settings(max_examples=400, deadline=None)
@given(batch=st.lists(messages, min_size=1, max_size=8))
def test_peer_garbage_raises_only_tidings_errors_and_routing_goes_on(batch):
    m = member()
    for message in batch:
        with contextlib.suppress(TidingsError):
            m.received(1, "127.0.0.1:9", message)
    decision = m.overlay.route_step(2, m.overlay.route(123, [96]))
    assert isinstance(decision, Deliver)  # alone in its overlay: every key is its own
