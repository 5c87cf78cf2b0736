"""tidings: wide-area publish/subscribe with exactly-once delivery.

    from tidings import Client
    client = await Client.connect("127.0.0.1:7400", service="monitor", instance="host1")
    pubend, tick = await client.publish("nodes/host1/load", b"...", attributes={"load": 2.5})

`tidings.sync.connect` offers the same as a blocking API. Names are imported on first use, so
`import tidings.core...` (e.g. in a Spark task) does not pull in the asyncio client.

Errors: every one is a TidingsError with a `code`. Bad input, refused before anything is sent:
ChannelError, FilterError, AttributesError, EventError, StartError, AddressError (also ValueErrors).
ConnectionClosed: the connection is closed or lost; its subclass BrokerUnreachable: none could be
made; and NotABroker: what answered is not a tidings broker; BrokerNotProven: a client with a
credential refused a broker whose signature did not verify. BrokerError: the broker refused a
request. GapError: retention released events a subscription asked for.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Client": "tidings.client.client",
    "Gap": "tidings.client.client",
    "PublishResult": "tidings.client.client",
    "Subscription": "tidings.client.client",
    "BrokerConfig": "tidings.core.config",
    "AddressError": "tidings.core.errors",
    "AttributesError": "tidings.core.errors",
    "BrokerError": "tidings.core.errors",
    "BrokerNotProven": "tidings.core.errors",
    "BrokerUnreachable": "tidings.core.errors",
    "ChannelError": "tidings.core.errors",
    "ConnectionClosed": "tidings.core.errors",
    "EventError": "tidings.core.errors",
    "FilterError": "tidings.core.errors",
    "GapError": "tidings.core.errors",
    "NotABroker": "tidings.core.errors",
    "ProtocolError": "tidings.core.errors",
    "StartError": "tidings.core.errors",
    "TidingsError": "tidings.core.errors",
    "Event": "tidings.core.event",
}

_SUBMODULES = ("sync", "testing")  # `tidings.sync.connect(...)` works after a bare `import tidings`
__all__ = list(_EXPORTS)  # the lazily imported names


def __dir__() -> list[str]:
    """What `dir(tidings)` shows: the public names (and the module's dunders), not our helpers."""
    return sorted({*__all__, *_SUBMODULES, *(name for name in globals() if name.startswith("__"))})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"tidings.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tidings' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
