"""Explicit states: every move a machine makes is one its transition table allows."""

from __future__ import annotations

import random

import pytest

from tidings.core.auth.guard import Guard
from tidings.core.broker import connection
from tidings.core.broker.advice import RouteAdvice
from tidings.core.broker.reading import Reading
from tidings.core.broker.refusals import ClientErrors
from tidings.core.config import BrokerConfig
from tidings.core.links import link as peers
from tidings.core.states import ForbiddenTransition
from tidings.core.wire import messages


def test_a_move_the_table_does_not_list_is_refused():
    with pytest.raises(ForbiddenTransition, match="peer link: waiting -> handshake"):
        peers.TRANSITIONS.move(peers.WAITING, peers.HANDSHAKE)
    with pytest.raises(ForbiddenTransition, match="client connection: closed -> open"):
        connection.TRANSITIONS.move(connection.CLOSED, connection.OPEN)
    assert connection.TRANSITIONS.move(connection.AWAITING_HELLO, connection.PEER) is connection.PEER


def test_states_read_as_text_in_status():
    assert peers.OPEN == "open" and f"{connection.AWAITING_HELLO}" == "awaiting-hello"


def test_a_connection_refuses_a_second_state_change_out_of_closed_whatever_the_bytes():
    """Random bytes after a HELLO never make the connection move where its table forbids."""
    rng = random.Random(5)
    cfg = BrokerConfig(frame_bytes_max=4096)
    for _ in range(200):
        r = Reading(cfg, Guard.open(), ClientErrors(), RouteAdvice("p", cfg))
        r.serve_to(lambda now, c, msg, out: 0, {})  # whatever is read is taken
        out: list = []
        r.accept(0, 1, out)
        c = r.connections[1]
        chunks = [messages.hello("svc", "i"), rng.randbytes(rng.randrange(40)), rng.randbytes(rng.randrange(40))]
        for chunk in chunks:
            r.received(0, 1, chunk, out)  # every frame pulled and judged: a forbidden move would raise here
        assert c.state in set(connection.ConnState)
