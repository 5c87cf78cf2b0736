"""Checks of the fields of typed broker-to-broker messages that several modules share.

A message is a msgpack-decoded list whose first element is its type. Each protocol keeps a table
type -> (field count, builder) and a `bad` function that makes its ProtocolError, prefixed with the
protocol's name. The two codecs every event passes at every hop (Scribe's, multicast/messages.py,
and guaranteed delivery's, reliability/messages.py) check their envelope and their names
themselves, so that a decode is one call into one module; access lists (multicast/access.py) and
the pubend directory (broker/directory.py) check their names with `name`.
"""

from __future__ import annotations

from collections.abc import Callable

from tidings.core.errors import ProtocolError

Bad = Callable[[str], ProtocolError]


def name(value: object, bytes_max: int, what: str, bad: Bad) -> str:
    """A non-empty string of at most `bytes_max` UTF-8 bytes."""
    # a string never has more characters than UTF-8 bytes, so a long one is refused before encoding
    if type(value) is str and 0 < len(value) <= bytes_max and len(value.encode("utf-8", "surrogatepass")) <= bytes_max:
        return value
    raise bad(f"{what} is a non-empty string of at most {bytes_max} bytes")
