"""The broker's gatekeeper: who a connection is, what it may do, and how much of it.

The broker holds one Guard and asks it at three moments, before anything is logged or a tree is
joined: the handshake (connection.py: `hello`, then the proof to handshake.py's challenge, then
`admitted`, which also counts the identity's connections against connections_max), each PUBLISH
(`check_publish`: the rules for each event's channel, then the identity's publish rates) and each
SUBSCRIBE (`check_subscribe`: the rules for the pattern and subscriptions_max). Each refusal is
a TidingsError for the broker to send to the client, counted per identity for `tidings status`
(the connection counts and logs it by reason: core/broker/refusals.py).
`reload` swaps in a new policy (SIGHUP): rules and limits apply to the next request, connections
already open keep their identity.

Across brokers the guard also speaks for its rules as a tree's creator (`creation`: the access
list a tree this broker joins first is created with, multicast/access.py) and words the refusals
of a tree's list, held by this broker for a tree it is in (`tree_refusal`), so that those too are
counted and logged with the identity.

The guard keeps the open connections of each identity (their subscription tables are the count
subscriptions_max is held against) and one pair of token buckets per identity and broker. Rates
meet backpressure, not refusal: before a PUBLISH is checked the broker asks `publish_wait_ns`, and
while the buckets lack what it needs (all its events and payload bytes, at most a full bucket) the
PUBLISH waits unread at the head of its connection, which is not read meanwhile (core/broker/connection.py
Hold.RATE): a flooder meets TCP backpressure, so its excess is never read, it slows itself down and
costs the broker about nothing. Only what a full bucket cannot hold (a PUBLISH of more events or
bytes than `rate * publish_burst_s`) is refused by `check_publish`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from tidings.core.auth.handshake import AuthError, Principal, ServerHandshake, admit_anonymous
from tidings.core.auth.limits import TokenBucket
from tidings.core.auth.names import ANONYMOUS, BROKER_OWN, NameRuleError, check_name
from tidings.core.auth.peer_auth import ClusterAuth
from tidings.core.auth.policy import AuthPolicy, Limits
from tidings.core.errors import AUTH_REQUIRED, FORBIDDEN, LIMIT_EXCEEDED, TidingsError
from tidings.core.multicast.access import Acl, AclTooLarge, acl_for

NonceSource = Callable[[int], bytes]  # n -> n unpredictable bytes (the runtime's secrets.token_bytes)
SERVER_NONCE_BYTES = 24
NOTES_KEPT_MAX = 64  # notes waiting for the runtime's log


class Member(Protocol):
    """What the guard needs of a client connection."""

    conn: int
    subs: dict[int, Any]


class _Account:
    """One identity's use of this broker."""

    __slots__ = ("bytes", "conns", "events", "own", "refusals")

    def __init__(self) -> None:
        self.conns: dict[int, Member] = {}
        self.own: set[int] = set()  # of `conns`, the broker's own (vouched): not held against connections_max
        self.events: TokenBucket | None = None
        self.bytes: TokenBucket | None = None
        self.refusals = 0


class TreeLists(Protocol):
    """The trees' access lists a node holds (core/multicast/agent.py ScribeAgent)."""

    def admits_everywhere(self, identity: str) -> bool: ...


def _publish_unchecked(policy: AuthPolicy) -> bool:
    """No access rule and no identity's publish rate: a PUBLISH never waits and is never refused by the guard."""
    limits = [policy.anonymous_limits, *(identity.limits for identity in policy.identities.values())]
    return not policy.rules.enabled and all(
        lim.publish_events_per_s is None and lim.publish_bytes_per_s is None for lim in limits)


class Guard:
    @classmethod
    def open(cls) -> Guard:
        """The guard of a broker without an auth file: anonymous clients, nothing else (so no nonce
        is ever drawn)."""
        def no_nonce(n: int) -> bytes:
            raise AssertionError("an open policy has no identity to challenge")
        return cls(AuthPolicy.open(), no_nonce)

    def __init__(self, policy: AuthPolicy, nonce: NonceSource) -> None:
        self.policy = policy
        self._publish_unchecked = _publish_unchecked(policy)
        self.nonce = nonce
        self._accounts: dict[str, _Account] = {}
        self.refusals = 0
        self.acl_too_large = 0  # trees left open: the rules bearing on them exceed ACL_ENTRIES_MAX
        self._unlogged: deque[tuple[str, str, str]] = deque(maxlen=NOTES_KEPT_MAX)

    @property
    def publish_unchecked(self) -> bool:
        """No access rule and no publish rate: `admit_publish` admits every PUBLISH, unlooked at."""
        return self._publish_unchecked

    def reload(self, policy: AuthPolicy) -> None:
        self.policy = policy
        self._publish_unchecked = _publish_unchecked(policy)
        for account in self._accounts.values():  # rates may have changed: start full again
            account.events = account.bytes = None

    def cluster_auth(self) -> ClusterAuth | None:
        """The credential brokers prove to each other (read once: changing it needs a restart)."""
        secret = self.policy.cluster_secret
        return None if secret is None else ClusterAuth(secret, self.nonce)

    # ---- the handshake ---------------------------------------------------------------------------

    def hello(self, service: str, instance: str, client_nonce: bytes | None) -> Principal | ServerHandshake:
        """An anonymous client's principal, or the challenge for one that authenticates. The service
        (an identity's name when authenticating) must follow names.py's rule, so that it cannot
        look like another's."""
        try:
            check_name(service, "a service name")
        except NameRuleError:
            self.refused()  # the connection counts and logs it, by reason (core/broker/refusals.py)
            raise
        try:
            if client_nonce is None:
                return admit_anonymous(self.policy, service, instance)
            return ServerHandshake(self.policy, service, instance, client_nonce,
                                   lambda: self.nonce(SERVER_NONCE_BYTES))
        except AuthError:
            self.refused()
            raise

    def vouched(self, identity: str, instance: str) -> Principal:
        """The principal of a connection of the broker's own that acts for `identity` without a
        credential to prove: a shared subscription group's at its home (core/share/home.py), for the
        identity its members' brokers authenticated and vouch for over the overlay's links (which the
        cluster secret authenticates, as trees' access lists trust them). AuthError when this
        broker's policy does not know the identity, or lets no anonymous client in. `BROKER_OWN`: the
        broker's own connection that acts for no client (MQTT's retained feed, core/mqtt/retained.py),
        which no client can be (it is not a valid name): admitted, and its subscriptions are not
        checked against the rules (nor trees' access lists, core/multicast/access.py)."""
        if identity == BROKER_OWN:
            return Principal(BROKER_OWN, instance, BROKER_OWN, authenticated=True)
        if identity == ANONYMOUS:
            if not self.policy.anonymous:
                self.refused()
                raise AuthError("this broker lets no anonymous client in", AUTH_REQUIRED)
            return Principal(ANONYMOUS, instance, ANONYMOUS)
        if identity not in self.policy.identities:
            self.refused()
            raise AuthError(f"identity {identity!r} is not in this broker's auth file")
        return Principal(identity, instance, identity, authenticated=True)

    def admitted(self, principal: Principal, member: Member, own: bool = False) -> None:
        """The handshake succeeded: count the connection, unless the identity has enough. A
        connection of the broker's own (`own`: `vouched`, a shared subscription group's at its home)
        is not held against connections_max, nor counted towards it: the identity's clients never
        find their connections taken by groups their members made. It is still one of the identity's
        connections, so its subscription counts against subscriptions_max (which bounds the groups
        one identity has homed at a broker)."""
        account = self._account(principal.identity)
        limit = self.policy.limits_of(principal.identity).connections_max
        if own:
            account.own.add(member.conn)
        elif limit is not None and len(account.conns) - len(account.own) >= limit:
            error = TidingsError(f"identity {principal.identity!r} already has connections_max={limit} "
                                 f"connections to this broker", LIMIT_EXCEEDED)
            self.refused(account)
            raise error
        account.conns[member.conn] = member

    def left(self, identity: str, conn: int) -> None:
        account = self._accounts.get(identity)
        if account is not None:
            account.conns.pop(conn, None)
            account.own.discard(conn)
            if not account.conns and not account.refusals:
                del self._accounts[identity]

    # ---- requests --------------------------------------------------------------------------------

    def publish_wait_ns(self, identity: str, events: list[object], now: int) -> int:
        """How long a PUBLISH of `events` must wait before its identity's buckets hold what it
        needs (0: it may be checked now). A PUBLISH larger than a full bucket waits for a full one."""
        if self._publish_unchecked:
            return 0
        limits = self.policy.limits_of(identity)
        if limits.publish_events_per_s is None and limits.publish_bytes_per_s is None:
            return 0
        account = self._account(identity)
        self._fill(account, limits, now)
        count = size = 0
        for ev in events:  # [channel, attributes, payload], and an idempotent one's producer sequence
            if type(ev) is list and 3 <= len(ev) <= 4 and type(ev[0]) is str:
                count += 1
                size += len(ev[2]) if type(ev[2]) is bytes else 0
        return max(0 if account.events is None else account.events.wait_ns(now, count),
                   0 if account.bytes is None else account.bytes.wait_ns(now, size))

    def admit_publish(self, identity: str, events: list[object], now: int) -> tuple[int, dict[int, TidingsError]]:
        """One look at a PUBLISH: how long it must wait (`publish_wait_ns`; then nothing is checked),
        or else, 0 and its refusals by index (`check_publish`). Without a rule or a publish rate in
        the policy, nothing is looked up: the intake's one call is answered here."""
        if self._publish_unchecked:
            return 0, {}
        wait_ns = self.publish_wait_ns(identity, events, now)
        return (wait_ns, {}) if wait_ns else (0, self.check_publish(identity, events, now))

    def check_publish(self, identity: str, events: list[object], now: int) -> dict[int, TidingsError]:
        """Refusals by index into `events`: channels the rules deny, then what exceeds the rates
        (what a PUBLISH that waited for `publish_wait_ns` holds beyond a full bucket). Malformed
        events are left to the intake's own checks (core/publish/intake.py)."""
        if self._publish_unchecked:
            return {}
        policy = self.policy
        limits = policy.limits_of(identity)
        rules = policy.rules
        if not rules.enabled and limits.publish_events_per_s is None and limits.publish_bytes_per_s is None:
            return {}
        account = self._account(identity)
        refused: dict[int, TidingsError] = {}
        for i, ev in enumerate(events):
            if type(ev) is not list or len(ev) != 3 or type(ev[0]) is not str:
                continue
            channel = ev[0]
            if not rules.may_publish(identity, channel):
                refused[i] = TidingsError(f"identity {identity!r} may not publish on {channel!r}", FORBIDDEN)
            elif not self._within_rates(account, limits, ev, now):
                refused[i] = TidingsError(f"identity {identity!r} is over its publish rate "
                                          f"(publish_events_per_s / publish_bytes_per_s, publish_burst_s): "
                                          f"a PUBLISH may hold at most a full bucket", LIMIT_EXCEEDED)
        if refused:
            self.refused(account, len(refused))
        return refused

    @staticmethod
    def _fill(account: _Account, limits: Limits, now: int) -> None:
        """The identity's buckets, full, the first time its rates apply."""
        if limits.publish_events_per_s is not None and account.events is None:
            account.events = TokenBucket(limits.publish_events_per_s, limits.publish_burst_s, now)
        if limits.publish_bytes_per_s is not None and account.bytes is None:
            account.bytes = TokenBucket(limits.publish_bytes_per_s, limits.publish_burst_s, now)

    @classmethod
    def _within_rates(cls, account: _Account, limits: Limits, ev: list[object], now: int) -> bool:
        cls._fill(account, limits, now)
        size = len(ev[2]) if type(ev[2]) is bytes else 0
        if account.bytes is not None and account.bytes.available(now) < size:
            return False
        if account.events is not None and not account.events.take(now, 1):
            return False
        return account.bytes is None or account.bytes.take(now, size)

    def may_read_everything(self, identity: str, trees: TreeLists | None) -> bool:
        """Whether `identity` may read every channel here: its rules let it subscribe to `#`, and
        every tree's access list the node holds (`trees`, in an overlay) admits it to the whole
        tree. A READ's SPAN frames carry every channel's records, for the reader to pick from."""
        return self.policy.rules.may_subscribe(identity, "#") and (trees is None or trees.admits_everywhere(identity))

    def check_subscribe(self, identity: str, pattern: str) -> TidingsError | None:
        if identity == BROKER_OWN:  # (the broker's own: `vouched`)
            return None
        account = self._account(identity)
        error = None
        limit = self.policy.limits_of(identity).subscriptions_max
        if not self.policy.rules.may_subscribe(identity, pattern):
            error = TidingsError(f"identity {identity!r} may not subscribe to {pattern!r}", FORBIDDEN)
        elif limit is not None and sum(len(m.subs) for m in account.conns.values()) >= limit:
            error = TidingsError(f"identity {identity!r} has subscriptions_max={limit} subscriptions at "
                                 f"this broker", LIMIT_EXCEEDED)
        if error is not None:
            self.refused(account)
        return error

    # ---- trees' access lists ---------------------------------------------------------------------

    def creation(self, identity: str, tree: str) -> tuple[str, Acl | None] | None:
        """(creator, access list) for a tree this broker joins for `identity`: None when its access
        control is off (the tree stays open) or its rules on the tree exceed the list's bound."""
        if not self.policy.rules.enabled:
            return None
        try:
            return identity, acl_for(self.policy.rules, tree)
        except AclTooLarge as exc:
            self.acl_too_large += 1
            self._unlogged.append((identity, "acl-too-large", f"{exc}: the tree is left open"))
            return None

    def recreations(self, created: list[tuple[str, str]]) -> list[tuple[str, str, Acl | None]]:
        """After a reload: (tree, creator, access list) again for each tree this broker created,
        from the rules now in force (None, an open tree, when access control is now off; a tree
        whose rules now exceed the bound keeps its old list)."""
        out: list[tuple[str, str, Acl | None]] = []
        for tree, creator in created:
            try:
                out.append((tree, creator, acl_for(self.policy.rules, tree)))
            except AclTooLarge:
                self.acl_too_large += 1
        return out

    def tree_refusal(self, identity: str, pattern: str, tree: str, creator: str) -> TidingsError:
        """The refusal of a subscription that tree `tree`'s access list excludes, counted."""
        error = TidingsError(f"identity {identity!r} may not subscribe to {pattern!r}: the access list of tree "
                             f"{tree!r}, created by {creator!r}, does not allow it", FORBIDDEN)
        self.refused(self._account(identity))
        return error

    # ---- observation -----------------------------------------------------------------------------

    def _account(self, identity: str) -> _Account:
        account = self._accounts.get(identity)
        if account is None:
            account = self._accounts[identity] = _Account()
        return account

    def refused(self, account: _Account | None = None, count: int = 1) -> None:
        """Count `count` refusals, in `account` too when the identity is known; the connection
        that sends it counts and logs it by reason (core/broker/refusals.py). Handshake refusals name who
        the client claimed to be and count in no account, so made-up names cost no memory."""
        self.refusals += count
        if account is not None:
            account.refusals += count

    def take_notes(self) -> list[tuple[str, str, str]]:
        """What the guard decided on its own since the last call, (identity, code, message), for
        the runtime to log (at most NOTES_KEPT_MAX): trees left open by acl-too-large."""
        if not self._unlogged:
            return []
        out = list(self._unlogged)
        self._unlogged.clear()
        return out

    def status(self) -> dict[str, Any]:
        return {"auth": {
            "anonymous_allowed": self.policy.anonymous,
            "identities_known": len(self.policy.identities),
            "rules": len(self.policy.rules.rules),
            "refusals": self.refusals,
            "acl_too_large": self.acl_too_large,
            "identities": {name: {"connections": len(a.conns), "refusals": a.refusals}
                           for name, a in sorted(self._accounts.items())},
        }}
