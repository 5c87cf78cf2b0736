"""MQTT's data representations (section 1.5 of 5.0, 1.5 of 3.1.1): integers of one, two and four
bytes, the Variable Byte Integer, UTF-8 strings with a two-byte length, binary data, string pairs.

`Reader` reads them from one packet's body and raises the codec's `Refusal` (malformed) on anything
that breaks a rule: a read past the end, a Variable Byte Integer longer than four bytes or not in its
shortest form (1.5.5: "MUST use the minimum number of bytes"), a string that is not well-formed UTF-8
(surrogates and overlong forms included, which Python's strict codec refuses) or holds U+0000
(1.5.4: "MUST NOT include an encoding of the null character"). The writers are for our own values:
a string over 65,535 bytes is our bug, an AssertionError.
"""

from __future__ import annotations

from typing import Final

from tidings.core.mqtt.refusal import malformed

VBI_MAX: Final = 268_435_455  # the largest Variable Byte Integer (four bytes)
VBI_BYTES_MAX: Final = 4
STRING_BYTES_MAX: Final = 0xFFFF


class Reader:
    """A cursor over one packet's body (or part of it, up to `end`)."""

    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end

    def left(self) -> int:
        return self.end - self.pos

    def _need(self, n: int, what: str) -> int:
        pos = self.pos
        if self.end - pos < n:
            raise malformed(f"{what}: the packet ends {n - (self.end - pos)} bytes early")
        self.pos = pos + n
        return pos

    def byte(self, what: str) -> int:
        return self.data[self._need(1, what)]

    def u16(self, what: str) -> int:
        pos = self._need(2, what)
        return int.from_bytes(self.data[pos:pos + 2], "big")

    def u32(self, what: str) -> int:
        pos = self._need(4, what)
        return int.from_bytes(self.data[pos:pos + 4], "big")

    def vbi(self, what: str) -> int:
        value, pos = read_vbi(self.data, self.pos, self.end, what)
        if pos < 0:
            raise malformed(f"{what}: the packet ends inside a Variable Byte Integer")
        self.pos = pos
        return value

    def binary(self, what: str) -> bytes:
        n = self.u16(what)
        pos = self._need(n, what)
        return bytes(self.data[pos:pos + n])

    def utf8(self, what: str) -> str:
        raw = self.binary(what)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise malformed(f"{what} is not well-formed UTF-8") from None
        if "\x00" in text:
            raise malformed(f"{what} holds U+0000")
        return text

    def pair(self, what: str) -> tuple[str, str]:
        return self.utf8(what + " name"), self.utf8(what + " value")

    def rest(self) -> bytes:
        pos = self.pos
        self.pos = self.end
        return bytes(self.data[pos:self.end])

    def finish(self, what: str) -> None:
        """The body must end here (a packet with bytes its fields do not account for is malformed)."""
        if self.pos != self.end:
            raise malformed(f"{what} has {self.end - self.pos} bytes after its last field")


def read_vbi(data: bytes | bytearray, pos: int, end: int, what: str) -> tuple[int, int]:
    """The Variable Byte Integer at `pos` and the position after it; (0, -1) when `end` comes
    first (more bytes may yet arrive); a refusal when it is longer than four bytes or not in its
    shortest form."""
    value = 0
    shift = 0
    for i in range(VBI_BYTES_MAX):
        if pos + i >= end:
            return 0, -1
        b = data[pos + i]
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            if i and b == 0:
                raise malformed(f"{what}: a Variable Byte Integer not in its shortest form")
            return value, pos + i + 1
        shift += 7
    raise malformed(f"{what}: a Variable Byte Integer longer than {VBI_BYTES_MAX} bytes")


def vbi(n: int) -> bytes:
    assert 0 <= n <= VBI_MAX, n
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def u16(n: int) -> bytes:
    return n.to_bytes(2, "big")


def u32(n: int) -> bytes:
    return n.to_bytes(4, "big")


def binary(b: bytes) -> bytes:
    assert len(b) <= STRING_BYTES_MAX, len(b)
    return len(b).to_bytes(2, "big") + b


def utf8(s: str) -> bytes:
    return binary(s.encode("utf-8"))
