"""Error codes shared by the broker, the wire and the clients.

Every error a peer can cause has a stable code (a short kebab-case string carried in ERROR frames)
and a message naming the problem. Our own broken invariants are `assert`s, never these.

What users catch (all exported by `tidings`), every one a TidingsError with a `code`:

    ChannelError, FilterError, AttributesError, EventError, StartError, AddressError
                     bad input, refused before anything is sent (also ValueErrors)
    ConnectionClosed the connection is closed or was lost (pending publishes may or may not be logged)
      BrokerUnreachable  no connection could be made (refused, timed out, no route)
        NotABroker       something answered there, but not a tidings broker
      BrokerNotProven    the broker failed the client's check of its signature (with a credential)
    BrokerError      the broker refused a request (its ERROR frame's code and message)
    GapError         retention released events a subscription asked for
    ProtocolError    a peer broke the wire protocol
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
LEASE_EXPIRED = "lease-expired"
BAD_ADDRESS = "bad-address"
UNREACHABLE = "unreachable"
NOT_A_BROKER = "not-a-broker"
# what a connection may make the broker hold (docs/security.md#limits-on-what-a-connection-can-make-a-broker-hold):
# each closes the connection, after an ERROR with this code
SEND_QUEUE_OVERFLOW = "send-queue-overflow"  # replies past send_queue_bytes_max + send_queue_overflow_bytes_max
FRAME_STALLED = "frame-stalled"  # a partial frame got no byte for frame_progress_timeout_ns
PARTIAL_FRAMES_BUDGET = "partial-frames-budget"  # partial frames of all connections past partial_frames_bytes_max
CONNECTION_CLOSED = "connection-closed"
# security (docs/security.md)
AUTH_REQUIRED = "auth-required"
AUTH_FAILED = "auth-failed"
BAD_NAME = "bad-name"  # a HELLO's service breaks the name rule (core/auth/names.py)
BAD_CREDENTIAL = "bad-credential"
FORBIDDEN = "forbidden"  # an access rule refused a publish, a subscription or a tree
LIMIT_EXCEEDED = "limit-exceeded"  # a limit of the identity: connections, subscriptions, a publish bucket
# between brokers
DUPLICATE_LINK = "duplicate-link"  # simultaneous dials: the one the smaller nodeId opened is kept
TOO_MANY_TREES = "too-many-trees"  # a node is in ScribeConfig.trees_max trees already
# readers (the Spark source)
DATA_LOSS = "data-loss"  # events a read must return were released before it read them


class TidingsError(Exception):
    """Base of every error tidings raises to its users."""

    code = "error"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class ChannelError(TidingsError, ValueError):
    code = BAD_CHANNEL


class AttributesError(TidingsError, ValueError):
    """Event attributes that are not a map of non-empty names to str, int, float or bool values."""

    code = BAD_ATTRIBUTES


class EventError(TidingsError, ValueError):
    """An event refused before it is sent: its payload is not bytes or str, or is too large."""

    code = BAD_MESSAGE


class StartError(TidingsError, ValueError):
    """A subscription's start or end that is not now, start, a tick or a datetime."""

    code = BAD_START


class AddressError(TidingsError, ValueError):
    """A broker address that is not HOST:PORT."""

    code = BAD_ADDRESS


class ConnectionClosed(TidingsError):
    """The connection to the broker is closed or was lost; publishes still pending may or may not
    have been logged (republish, or check with a read)."""

    code = CONNECTION_CLOSED


class BrokerUnreachable(ConnectionClosed):
    """No connection to the broker could be made: refused, timed out, no route, unknown host."""

    code = UNREACHABLE


class NotABroker(BrokerUnreachable):
    """Something accepted the connection but did not answer as a tidings broker."""

    code = NOT_A_BROKER


class BrokerNotProven(ConnectionClosed):
    """A client with a credential refused the broker: its WELCOME signature (or its challenge)
    does not verify, so it does not hold this identity's verifier: the reply was tampered with in
    transit, or this is not the broker meant. The client closed the connection."""

    code = AUTH_FAILED


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

    def __init__(self, after_tick: int, through_tick: int, pubend: str | None = None) -> None:
        of = "" if pubend is None else f" of pubend {pubend}"
        super().__init__(
            f"events{of} after tick {after_tick} up to tick {through_tick} were released before they were read"
        )
        self.after_tick = after_tick
        self.through_tick = through_tick
        self.pubend = pubend
