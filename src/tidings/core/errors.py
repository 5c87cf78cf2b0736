"""Error codes shared by the broker, the wire and the clients.

Every error a peer can cause has a stable code (a short kebab-case string carried in ERROR frames)
and a message naming the problem. Our own broken invariants are `assert`s, never these.
"""

from __future__ import annotations

BAD_FRAME = "bad-frame"
FRAME_TOO_LARGE = "frame-too-large"
UNKNOWN_MESSAGE = "unknown-message"
BAD_MESSAGE = "bad-message"
VERSION = "version-mismatch"
HANDSHAKE = "handshake"
HANDSHAKE_TIMEOUT = "handshake-timeout"
BAD_CHANNEL = "bad-channel"
BAD_PATTERN = "bad-pattern"
BAD_FILTER = "bad-filter"
BAD_ATTRIBUTES = "bad-attributes"
EVENT_TOO_LARGE = "event-too-large"
BAD_START = "bad-start"
SUBSCRIPTION_EXISTS = "subscription-exists"
TOO_MANY_SUBSCRIPTIONS = "too-many-subscriptions"
UNKNOWN_SUBSCRIPTION = "unknown-subscription"
SHUTTING_DOWN = "shutting-down"
LOG_UNREADABLE = "log-unreadable"


class TidingsError(Exception):
    """Base of every error tidings raises to its users."""

    code = "error"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class ChannelError(TidingsError, ValueError):
    code = BAD_CHANNEL


class FilterError(TidingsError, ValueError):
    """A filter expression that does not parse or type-check; `position` is a 0-based offset."""

    code = BAD_FILTER

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} at position {position}")
        self.position = position
        self.reason = message


class ProtocolError(TidingsError):
    """A peer sent bytes that break the wire protocol. `fatal` means the byte stream cannot go on."""

    def __init__(self, code: str, message: str, fatal: bool = False) -> None:
        super().__init__(message, code)
        self.fatal = fatal


class BrokerError(TidingsError):
    """An ERROR frame from the broker, raised in the client."""


class GapError(TidingsError):
    """Events a subscription asked for were released before it read them (an explicit gap)."""

    code = "gap"

    def __init__(self, after_tick: int, through_tick: int) -> None:
        super().__init__(
            f"events after tick {after_tick} up to tick {through_tick} were released by retention"
        )
        self.after_tick = after_tick
        self.through_tick = through_tick
