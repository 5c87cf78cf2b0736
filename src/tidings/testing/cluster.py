"""Several real brokers joined in one overlay, for integration tests: start, kill -9, wait.

The first broker starts a new overlay; the others start together and join through it. Every
broker listens on a free port of 127.0.0.1. With `identities` the brokers' pubend ids, and so their
nodeIds, are the test's choice: the overlay's layout (who is whose neighbour, which broker is the
rendez-vous point of a tree) is then the same on every run. `wait_joined` waits (with a deadline, never a fixed
sleep) until each running broker reports itself in the overlay, `wait_ring` until every leaf set
is the one the nodeIds give, and `wait` until any condition on the brokers holds. `restart` stops
one broker with a drain and waits until it is back in the overlay. `stop` (or leaving the `with`
block) stops every broker still running.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tidings.core.errors import TidingsError
from tidings.core.overlay.leaf_set import LeafSet
from tidings.core.overlay.node_id import NodeRef
from tidings.storage import load_or_create_identity
from tidings.testing.broker_process import BrokerProcess, wait_for

T = TypeVar("T")
LEAF_SET_SIZE = 16  # BrokerConfig's default


# Liveness timers for a cluster on one machine, where repair should take seconds (the defaults are
# for wide-area links), and leaf sets of two, so that routes take two hops and trees have
# forwarders even among five brokers. A `config` for Cluster or BrokerProcess.
LOCAL_LIVENESS = {
    "leaf_set_size": 2,
    "ping_interval_ns": 500_000_000,
    "keepalive_interval_ns": 300_000_000,
    "failure_timeout_ns": 1_000_000_000,
    "heartbeat_interval_ns": 300_000_000,
    "parent_timeout_ns": 1_000_000_000,
    "empty_tree_hold_ns": 1_000_000_000,
}


class Cluster:
    def __init__(self, root: Path, size: int, config: dict[str, int] | None = None,
                 start_timeout: float = 60.0, identities: list[str] | None = None, http: bool = False,
                 args: list[str] | None = None, credential: str | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        assert size >= 1 and (identities is None or len(identities) == size)
        self.root = Path(root)
        self.size = size
        self.config = config
        self.start_timeout = start_timeout
        self.identities = identities
        self.http = http  # each broker serves /metrics and /status on a free port
        self.args = args  # more options for every broker, e.g. ["--auth", FILE]
        self.credential = credential  # what `status` authenticates with
        self.tls = tls  # and the TLS it connects with
        self.brokers: list[BrokerProcess] = []

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Cluster:
        for i, pubend in enumerate(self.identities or []):
            load_or_create_identity(self.root / f"broker-{i}", functools.partial(str, pubend))
        try:
            first = BrokerProcess(self.root / "broker-0", self.config, start_timeout=self.start_timeout,
                                  http=self.http, args=self.args, credential=self.credential, tls=self.tls)
            self.brokers.append(first)
            first.start()
            others = [BrokerProcess(self.root / f"broker-{i}", self.config, start_timeout=self.start_timeout,
                                    join=first.address, http=self.http, args=self.args,
                                    credential=self.credential, tls=self.tls)
                      for i in range(1, self.size)]
            self.brokers += others
            for b in others:
                b.spawn()
            for b in others:
                b.wait_ready()
            self.wait_joined(self.start_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for b in self.brokers:
            b.stop()

    @property
    def running(self) -> list[BrokerProcess]:
        return [b for b in self.brokers if b.running]

    def __getitem__(self, index: int) -> BrokerProcess:
        return self.brokers[index]

    def by_address(self, address: str) -> BrokerProcess:
        return next(b for b in self.brokers if b.address == address)

    def kill(self, broker: BrokerProcess) -> None:
        """kill -9 one broker: no goodbye to its peers, whose connections simply drop."""
        broker.kill()

    def restart(self, broker: BrokerProcess, timeout: float = 60.0) -> int:
        """Stop `broker` with SIGTERM (a drain: its clients are advised to move) and start it again,
        joining through a running member, and return once every running broker is back in the
        overlay with a full leaf set (as `tidings cluster restart`); returns the exit code of its stop
        (0 after a drain). Its ready line alone is not
        "back": it listens before it has joined, and a rolling restart that stops the next broker
        then may stop the only member it can join through, leaving the last one draining with no
        broker to advise its clients to (they are disconnected at its stop)."""
        code = broker.stop()
        up = [b.address for b in self.running if b is not broker]
        if broker.join not in up:
            broker.join = up[0] if up else None
        broker.start()
        self.wait_joined(timeout)
        return code

    def status(self, broker: BrokerProcess) -> dict[str, Any] | None:
        """The broker's status, or None when it does not answer (killed, or not serving yet)."""
        try:
            return broker.status()
        except (TidingsError, OSError):
            return None

    def statuses(self) -> dict[str, dict[str, Any] | None]:
        return {b.address: self.status(b) for b in self.running}

    def wait(self, condition: Callable[[], T], timeout: float = 30.0, what: str = "condition") -> T:
        return wait_for(condition, timeout, interval=0.1, what=what)

    def wait_joined(self, timeout: float = 30.0) -> None:
        """Wait until every running broker is in the overlay with a full leaf set: every other
        broker when they all fit in one (its two halves then overlap), else leaf_set_size of them."""
        size = (self.config or {}).get("leaf_set_size", LEAF_SET_SIZE)

        def joined() -> bool:
            addresses = {b.address for b in self.running}
            for status in self.statuses().values():
                overlay = (status or {}).get("overlay")
                if not overlay or not overlay.get("joined"):
                    return False
                leaves = {leaf[1] for leaf in overlay.get("leaf_set", [])}
                others = addresses - {overlay.get("address")}
                if not (others <= leaves if len(others) <= size else len(leaves) >= size):
                    return False
            return True

        self.wait(joined, timeout, what="every broker joined the overlay")

    def leaf_sets_unsettled(self, statuses: dict[str, dict[str, Any] | None] | None = None) -> list[str]:
        """What keeps the overlay's leaf sets from those the running brokers' nodeIds give (empty
        once settled): a running broker that does not answer or has not joined, or a leaf set other
        than the brokers numerically nearest it. `wait_joined` asks only for full leaf sets, which a
        wrong neighbour fills too; until this is empty, the broker closest to a tree's key may not
        be its root yet (Scribe hands the tree over later, but keeps the paths it was joined along)."""
        statuses = self.statuses() if statuses is None else statuses
        size = (self.config or {}).get("leaf_set_size", LEAF_SET_SIZE)
        ids = {b.address: int(b.node_id or "0", 16) for b in self.running}
        out = []
        for address, me in ids.items():
            overlay = (statuses.get(address) or {}).get("overlay")
            if not overlay or not overlay.get("joined"):
                out.append(f"{address} not joined")
                continue
            nearest = LeafSet(me, size)
            for other, node_id in ids.items():
                nearest.add(NodeRef(node_id, other))
            want = sorted(n.address for n in nearest.members())
            leaves = sorted(leaf[1] for leaf in overlay["leaf_set"])
            if leaves != want:
                out.append(f"{address} leaf set {leaves}, nearest {want}")
        return out

    def wait_ring(self, timeout: float = 30.0) -> None:
        """Wait until `leaf_sets_unsettled` is empty: every leaf set is what joins converge to.
        Brokers that joined together settle within a keep-alive round (docs/cluster.md, "Brokers
        that join together"); a test that measures from the first event waits for it, so that no
        tree has two rendez-vous points meanwhile. TimeoutError says what was still unsettled."""
        unsettled: list[str] = []

        def settled() -> bool:
            unsettled[:] = self.leaf_sets_unsettled()
            return not unsettled

        try:
            self.wait(settled, timeout, what="every leaf set of the nearest brokers")
        except TimeoutError:
            raise TimeoutError(f"leaf sets not settled within {timeout} s: {unsettled}") from None
