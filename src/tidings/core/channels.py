"""Channel names and patterns (PsEPR's hierarchical channels, MQTT's wildcard rules).

A channel is one or more `/`-separated segments: `nodes/host1/load`. Segments may be empty
(`a//b` has three), as in MQTT, but a channel is never empty and never holds `+`, `#` or NUL.
A pattern is a channel that may use `+` for exactly one segment and `#` for the rest of the
name (zero or more segments, last only): `nodes/+/load`, `nodes/#`, `#`. A wildcard must fill a
whole segment (`a+` is an error). A pattern starting with a wildcard does not match channels whose
first segment starts with `$` (reserved for system channels), again as MQTT.
"""

from __future__ import annotations

from tidings.core.errors import BAD_PATTERN, ChannelError

CHANNEL_BYTES_MAX = 1024
SEGMENTS_MAX = 32


def _check_common(text: object, what: str) -> str:
    if not isinstance(text, str):
        raise ChannelError(f"{what} must be a string, not {type(text).__name__}")
    if not text:
        raise ChannelError(f"{what} is empty")
    if "\x00" in text:
        raise ChannelError(f"{what} {text!r} contains a NUL character")
    if len(text.encode("utf-8", "surrogatepass")) > CHANNEL_BYTES_MAX:
        raise ChannelError(f"{what} is longer than {CHANNEL_BYTES_MAX} bytes")
    if text.count("/") >= SEGMENTS_MAX:
        raise ChannelError(f"{what} has more than {SEGMENTS_MAX} segments")
    return text


def validate_channel(channel: object) -> str:
    """Return `channel` if it is a valid channel name, else raise ChannelError naming the problem."""
    text = _check_common(channel, "channel")
    if "+" in text or "#" in text:
        raise ChannelError(f"channel {text!r} contains a wildcard ('+' or '#'); only patterns may")
    return text


def validate_pattern(pattern: object) -> str:
    """Return `pattern` if valid, else raise ChannelError (code bad-pattern) naming the problem."""
    try:
        text = _check_common(pattern, "pattern")
    except ChannelError as exc:
        raise ChannelError(str(exc), BAD_PATTERN) from None
    segments = text.split("/")
    for i, seg in enumerate(segments):
        if seg == "#":
            if i != len(segments) - 1:
                raise ChannelError(f"pattern {text!r}: '#' must be the last segment", BAD_PATTERN)
        elif seg != "+" and ("+" in seg or "#" in seg):
            raise ChannelError(
                f"pattern {text!r}: segment {seg!r} mixes a wildcard with other characters",
                BAD_PATTERN,
            )
    return text


def pattern_matches(pattern: str, channel: str) -> bool:
    """True when the (valid) `pattern` matches the (valid) `channel`."""
    if pattern == channel:
        return True
    if pattern[0] in "+#" and channel.startswith("$"):
        return False
    p = pattern.split("/")
    c = channel.split("/")
    for i, seg in enumerate(p):
        if seg == "#":
            return True
        if i >= len(c):
            return False
        if seg != "+" and seg != c[i]:
            return False
    return len(p) == len(c)
