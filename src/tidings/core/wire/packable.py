"""What the core hands to msgpack: the type of every value a machine puts on the wire.

Machines pass wire messages to each other as values that msgpack can pack as they are (a Scribe
EVENT's `event`, a Pastry route's `payload`, a `PeerSend`'s `message`), so a composer can carry
them without decoding. `Packable` says what such a value may hold; `WireArray` is one message or
one opaque application value carried inside another: a msgpack array (a message's first element is
its type, core/wire/types.py).

These are the types of what we send. What arrives is a decoded msgpack value of unknown shape: each
layer's decoder (`decode_typed` and the `_DECODERS` tables beside it) takes it as a list of Any and
checks every field it reads before it builds a typed message, so nothing past a decoder holds an
unchecked list. A client message's field that the decoder leaves to the broker to check (a
PUBLISH's events) is a `list[object]`, which nothing can read without checking it first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

# Sequence and Mapping rather than list and dict: they are covariant, so a list[str] or a
# dict[str, int] is Packable as it is. Map keys are strings: peers decode with strict_map_key.
Packable: TypeAlias = "bool | int | float | str | bytes | Sequence[Packable] | Mapping[str, Packable] | None"
WireArray: TypeAlias = "list[Packable]"

__all__ = ["Packable", "WireArray"]
