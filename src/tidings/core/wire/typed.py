"""Decoding typed broker-to-broker messages: the checks every protocol's `decode` shares.

A message is a msgpack-decoded list whose first element is its type. Each protocol (Scribe,
guaranteed delivery) keeps a table type -> (field count, builder) and a `bad` function that makes
its ProtocolError, prefixed with the protocol's name; `decode_typed` checks the envelope and hands
the fields to the builder, which checks them with helpers like `name`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from tidings.core.errors import ProtocolError

T = TypeVar("T")
Bad = Callable[[str], ProtocolError]


# The decoders' boundary: each builder takes a message's fields as msgpack decoded them (a list of
# Any, unchecked) and checks every field it reads before it builds the typed message it returns.
def decode_typed(message: object, decoders: Mapping[int, tuple[int, Callable[[list[Any]], T]]], bad: Bad) -> T:
    if type(message) is not list or not message or type(message[0]) is not int:
        raise bad("a message is a list starting with its type")
    shape = decoders.get(message[0])
    if shape is None:
        raise bad(f"unknown message type {message[0]}")
    count, build = shape
    if len(message) != count + 1:
        raise bad(f"message type {message[0]} has {count} fields")
    return build(message[1:])


def name(value: object, bytes_max: int, what: str, bad: Bad) -> str:
    """A non-empty string of at most `bytes_max` UTF-8 bytes."""
    # a string never has more characters than UTF-8 bytes, so a long one is refused before encoding
    if type(value) is str and 0 < len(value) <= bytes_max and len(value.encode("utf-8", "surrogatepass")) <= bytes_max:
        return value
    raise bad(f"{what} is a non-empty string of at most {bytes_max} bytes")
