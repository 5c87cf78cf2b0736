"""The blocking facade over the asyncio client, for scripts, shells and Spark tasks.

A `SyncClient` runs its own event loop on a background thread; each call hands a coroutine to it
and waits. Subscriptions are fetched in batches, so iterating one costs one cross-thread hop per
batch rather than per event.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from tidings.aio.loop import new_event_loop
from tidings.client.client import ACK_INTERVAL_S, Client, Gap, PublishResult, Subscription, advance
from tidings.core.durable.checkpoint import Checkpoint
from tidings.core.errors import GapError, StartError
from tidings.core.event import Event
from tidings.core.session.client_session import Start
from tidings.core.wire.messages import Records, Span

T = TypeVar("T")
STOP_WAIT_S = 10.0  # for the loop's tasks to unwind, and then for its thread to end
FOREVER = float("inf")  # a live subscription may rightly be silent for hours

__all__ = ["Gap", "PublishResult", "SyncClient", "SyncSubscription", "connect"]


class SyncSubscription:
    """A blocking iterator of Events (and Gap markers with on_gap="event")."""

    def __init__(self, owner: SyncClient, sub: Subscription) -> None:
        self._owner = owner
        self._sub = sub
        self._items: collections.deque[Any] = collections.deque()  # SILENCE markers too
        self._ended = False
        self.position = sub.position
        # the token moves in this thread (get), so the automatic ack is made here too, not on the loop
        sub.auto_ack = False
        self.auto_ack = True
        self._acked_at = time.monotonic()

    def get(self, timeout: float | None = None) -> Event | Gap | None:
        """The next item, waiting at most `timeout` seconds (TimeoutError; None waits for ever);
        None once the subscription ended."""
        checkpoint = self._sub.checkpoint
        if checkpoint is not None and self.auto_ack and time.monotonic() - self._acked_at >= ACK_INTERVAL_S:
            self.ack()  # what earlier calls returned: the application asks for more, it is done with those
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if not self._items:
                if self._ended:
                    return None
                wait = FOREVER if deadline is None else max(0.0, deadline - time.monotonic())
                batch = self._owner._call(self._sub._take(4096), wait)
                if not batch:
                    self._ended = True
                    return None
                self._items.extend(batch)
            item = self._items.popleft()
            if checkpoint is not None:  # the token follows what the application has taken
                (shown,) = advance(checkpoint, [item]) or (None,)
                if shown is None:
                    continue  # a SILENCE
            if isinstance(item, Gap) and self._sub.on_gap == "raise":
                raise GapError(item.after, item.through, item.pubend)
            return item  # type: ignore[no-any-return]

    def ack(self, token: str | None = None) -> None:
        """As Subscription.ack: the application consumed everything up to `token` (default: the
        token after the items `get` returned so far)."""
        if self._sub.checkpoint is None:
            raise StartError("only a durable subscription is acknowledged (subscribe with durable=True)")
        wire = (self._sub.checkpoint if token is None else Checkpoint.decode(token)).to_wire()[:2]
        self._acked_at = time.monotonic()
        self._owner._soon(self._sub._client._release, self._sub, wire)

    @property
    def token(self) -> str:
        """As Subscription.token: the checkpoint after the items `get` returned so far."""
        return self._sub.token

    def __iter__(self) -> Iterator[Event | Gap]:
        while (item := self.get()) is not None:
            yield item

    def close(self, forget: bool = False) -> None:
        """As Subscription.close: a durable subscription is then away (`forget`: ended for good)."""
        self._owner._call(self._sub.close(forget))

    def __enter__(self) -> SyncSubscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncClient:
    def __init__(self, address: str, service: str, instance: str | None, timeout: float,
                 request_timeout: float | None, credential: str | None = None,
                 tls: ssl.SSLContext | bool = False, follow_advice: bool = True,
                 failover: Sequence[str] = ()) -> None:
        self.gaps_skipped: list[Gap] = []
        self.request_timeout = request_timeout
        self._loop = new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tidings-sync", daemon=True)
        self._thread.start()
        try:
            self._client: Client = self._call(
                Client.connect(address, service=service, instance=instance, timeout=timeout,
                               credential=credential, tls=tls, follow_advice=follow_advice, failover=failover))
        except BaseException:
            self._stop_loop()
            raise

    def _soon(self, function: Any, *args: Any) -> None:
        """Call `function(*args)` on the client's loop, without waiting for it."""
        self._loop.call_soon_threadsafe(function, *args)

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the client's loop; TimeoutError after `timeout` s (default request_timeout)."""
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        if timeout is None:
            timeout = self.request_timeout
        try:
            return fut.result(None if timeout == FOREVER else timeout)
        except BaseException:  # a timeout or Ctrl-C: the coroutine must not run on unwatched
            fut.cancel()
            raise

    @property
    def pubend(self) -> str | None:
        return self._client.pubend

    @property
    def event_bytes_max(self) -> int:
        """As Client.event_bytes_max: the largest payload the broker accepts."""
        return self._client.event_bytes_max

    @property
    def address(self) -> str:
        """The broker this client is connected to now (route advice may have moved it)."""
        return self._client.address

    @property
    def moves(self) -> int:
        return self._client.moves

    @property
    def on_move(self) -> Callable[[str, str, str], None] | None:
        """As Client.on_move: called (old address, new address, why) on each move, on the
        client's own thread."""
        return self._client.on_move

    @on_move.setter
    def on_move(self, callback: Callable[[str, str, str], None] | None) -> None:
        self._client.on_move = callback

    def move(self, address: str) -> bool:
        """As Client.move: go on at the broker at `address` now."""
        return self._call(self._client.move(address))

    def publish(self, channel: str, payload: bytes | str = b"", attributes: dict[str, Any] | None = None,
                *, producer: str | None = None, seq: int | None = None) -> PublishResult:
        """As Client.publish: with `producer` and `seq`, an idempotent publish."""
        async def one() -> PublishResult:
            return await self._client.publish(channel, payload, attributes, producer=producer, seq=seq)

        return self._call(one())

    def publish_many(self, items: Iterable[tuple[Any, ...]], *, producer: str | None = None) -> list[PublishResult]:
        """As Client.publish_many: with `producer`, items are (channel, payload, attributes, seq)."""
        return self._call(self._client.publish_many(list(items), producer=producer))

    def subscribe(self, pattern: str, *, filter: str | None = None, start: Start = "now",
                  end: int | None = None, on_gap: str = "raise", order: str = "publisher",
                  durable: bool | str = False, token: str | None = None) -> SyncSubscription:
        """As Client.subscribe (`durable` and `token` there)."""
        sub = self._call(self._client.subscribe(pattern, filter=filter, start=start, end=end, on_gap=on_gap,
                                                order=order, durable=durable, token=token))
        return SyncSubscription(self, sub)

    def read(self, pattern: str, *, filter: str | None = None, after: int = 0, end: int | None = None,
             on_gap: str = "raise") -> Iterator[Event | Gap]:
        """A bounded read of events with after < tick <= end (default: the durable tail now).

        on_gap: "raise" (GapError), "event" (yield Gap markers) or "skip" (count them in
        `self.gaps_skipped` and go on).
        """
        if end is None:
            end = int(self.status()["last_tick"])
        mode = "raise" if on_gap == "raise" else "event"
        with self.subscribe(pattern, filter=filter, start=after, end=end, on_gap=mode) as sub:
            while (item := sub.get(self.request_timeout)) is not None:
                if isinstance(item, Gap) and on_gap == "skip":
                    self.gaps_skipped.append(item)
                    continue
                yield item

    def read_records(self, pattern: str, *, filter: str | None = None, after: int = 0,
                     end: int, spans: bool = False) -> Iterator[Records | Span]:
        """As Client.read_records, blocking: the RECORDS (and with `spans`, SPAN) items of a bounded
        read in bulk of this broker's own log, in tick order; GapError where retention released
        ticks. Closing the iterator ends the broker's read."""
        sub = self._call(self._client.read_records(pattern, filter=filter, after=after, end=end, spans=spans))
        with SyncSubscription(self, sub) as items:
            while (item := items.get(self.request_timeout)) is not None:
                yield item  # type: ignore[misc]

    def status(self) -> dict[str, Any]:
        return self._call(self._client.status())

    def close(self) -> None:
        if self._thread.is_alive():
            try:
                self._call(self._client.close(), 10)
            finally:
                self._stop_loop()

    def _stop_loop(self) -> None:
        """Cancel what still runs on the loop (a connect interrupted by Ctrl-C, say) and let it
        unwind, then stop the loop: no task is left pending to be destroyed at exit."""
        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(cancel_all(), self._loop).result(STOP_WAIT_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(STOP_WAIT_S)
        if not self._loop.is_running():
            self._loop.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(address: str, *, service: str = "tidings-client", instance: str | None = None,
            timeout: float = 10.0, request_timeout: float | None = 60.0,
            credential: str | None = None, tls: ssl.SSLContext | bool = False,
            follow_advice: bool = True, failover: Sequence[str] = ()) -> SyncClient:
    """Connect to a broker and return a blocking client (use it as a context manager).

    `timeout` bounds the connection; `request_timeout` bounds every call that expects an answer
    (publish, status, subscribe, and each wait for the next batch of a bounded `read`), so a hung
    broker raises TimeoutError instead of blocking for ever. `None` waits without limit.
    `credential` (NAME:SECRET) authenticates as that identity; `tls`
    as in Client.connect; `follow_advice` and `failover` as in Client.connect.
    """
    return SyncClient(address, service, instance, timeout, request_timeout, credential, tls, follow_advice,
                      failover)
