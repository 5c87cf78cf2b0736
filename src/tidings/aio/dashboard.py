"""The live dashboard served beside `/metrics`: a page and two server-sent-event streams.

- `/dashboard` (and `/`): dashboard.html, a page with its own small SVG code (no third-party script).
- `/dashboard/stream`: a cluster snapshot every `refresh_s` seconds: the brokers and their links
  with RTTs, each channel's tree (root, forwarders, members), events per second per channel (the
  traffic timeline) and each broker's counters.
- `/dashboard/inspect?pattern=P&filter=F`: the events of pattern P (and filter F) as they arrive,
  with their attributes and payloads.

Any broker of a cluster serves the whole cluster's view. The serving broker reads its own status,
then asks each broker it knows of for theirs with the Python client's `status()` over the port that
brokers and clients share: first the peers in its own status, then the peers in theirs, up to
`BROKERS_MAX`. So only the client port must be reachable between brokers (it is, for the overlay),
and another broker's HTTP port need be neither known nor open. The clients stay connected while
someone watches and are closed when the last viewer leaves; nothing is polled when nobody watches.
A broker that requires credentials refuses these anonymous status requests: the view then shows
the serving broker and, for the others, the reason they could not be read.

The inspector subscribes through this broker's own client port, like any subscriber: what it
shows is exactly what a client of this broker receives, and the broker's flow control applies to
it (a page that cannot keep up makes its subscription read back from the log, never memory grow).
A page that goes away is noticed even when no event flows: every `HEARTBEAT_S` the inspector
writes an SSE comment line, which fails once the page has closed its connection (aiohttp then
has no transport), and the inspector's slot, its client connection and its subscription are
released at once (before, a quiet pattern kept all three until the broker stopped, and after
`INSPECTORS_MAX` closed pages every inspector request got 503).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
import json
import logging
import ssl
import time
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import replace
from importlib import resources
from typing import Any

from aiohttp import web

from tidings.client.client import Client, Gap
from tidings.core.errors import TidingsError

log = logging.getLogger("tidings.dashboard")
REFRESH_S = 1.0
BROKERS_MAX = 64  # brokers one view reads, the serving one included
STATUS_TIMEOUT_S = 2.0  # for connecting to another broker and for its status reply
TIMELINE_SAMPLES = 120  # rate samples kept per channel (two minutes at REFRESH_S)
TIMELINE_CHANNELS_MAX = 8  # channels drawn in the traffic timeline, the busiest
INSPECTORS_MAX = 8  # inspector streams open at once on one broker
HEARTBEAT_S = 2.0  # an inspector writes a comment line this often, to notice a closed page
HEARTBEAT = b": heartbeat\n\n"  # an SSE comment: EventSource ignores it
PAYLOAD_SHOWN_BYTES_MAX = 2048  # an inspected event's payload beyond this is cut
SERVICE = "tidings-dashboard"  # how the dashboard's own connections show in status


def _iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class ClusterView:
    """Cluster snapshots for the viewers of one broker's dashboard, read while anyone watches."""

    def __init__(self, status: Callable[[], dict[str, Any]], broker_address: str,
                 client_tls: ssl.SSLContext | None = None, refresh_s: float = REFRESH_S) -> None:
        self._status = status
        self.broker_address = broker_address
        self._tls = client_tls
        self.refresh_s = refresh_s
        self._clients: dict[str, Client] = {}
        self._viewers = 0
        self._poller: asyncio.Task[None] | None = None
        self._snapshot: dict[str, Any] | None = None
        self._fresh = asyncio.Event()
        self._history: deque[tuple[float, dict[str, int]]] = deque(maxlen=TIMELINE_SAMPLES + 1)

    async def snapshots(self) -> AsyncGenerator[dict[str, Any], None]:
        """Each new snapshot while the caller iterates (close it with contextlib.aclosing)."""
        self._viewers += 1
        if self._poller is None:
            self._poller = asyncio.ensure_future(self._poll())
        try:
            if self._snapshot is not None:
                yield self._snapshot
            while True:
                fresh = self._fresh
                await fresh.wait()
                assert self._snapshot is not None
                yield self._snapshot
        finally:
            self._viewers -= 1
            if self._viewers == 0:
                await self.close()

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
            self._poller = None
        self._history.clear()  # a timeline resumes with the next viewer, without a gap spanning the pause
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            with contextlib.suppress(Exception):
                await client.close()

    async def _poll(self) -> None:
        while True:
            try:
                self._snapshot = await self.snapshot()
            except Exception:  # e.g. a malformed status from another broker: keep serving the last view
                log.exception("dashboard snapshot failed")
                if self._snapshot is None:
                    self._snapshot = {"time": _iso(time.time()), "served_by": self.broker_address, "brokers": [],
                                      "links": [], "trees": [], "timeline": {"times": [], "series": {}, "totals": {}}}
            fresh, self._fresh = self._fresh, asyncio.Event()
            fresh.set()
            await asyncio.sleep(self.refresh_s)

    async def snapshot(self) -> dict[str, Any]:
        """Read every broker reachable from this one (breadth first) and put the view together."""
        own = self._status()
        me = (own.get("overlay") or {}).get("address") or self.broker_address
        statuses: dict[str, dict[str, Any]] = {me: own}
        frontier = _peer_addresses(own)
        while frontier and len(statuses) < BROKERS_MAX:
            wave = [a for a in dict.fromkeys(frontier) if a not in statuses][:BROKERS_MAX - len(statuses)]
            replies = await asyncio.gather(*(self._status_of(a) for a in wave))
            statuses.update(zip(wave, replies, strict=True))
            frontier = [p for st in replies for p in _peer_addresses(st)]
        for gone in set(self._clients) - set(statuses):
            await self._drop(gone)
        now = time.time()
        return {"time": _iso(now), "served_by": me, "brokers": [_broker(a, st) for a, st in statuses.items()],
                "links": _links(statuses), "trees": _trees(statuses), "timeline": self._timeline(now, statuses)}

    async def _status_of(self, address: str) -> dict[str, Any]:
        try:
            client = self._clients.get(address)
            if client is None:
                # never moved by route advice: this connection is for `address`'s own status
                client = await Client.connect(address, service=SERVICE, timeout=STATUS_TIMEOUT_S,
                                              tls=self._tls or False, follow_advice=False)
                self._clients[address] = client
            async with asyncio.timeout(STATUS_TIMEOUT_S):
                return await client.status()
        except (TidingsError, OSError, TimeoutError) as exc:
            await self._drop(address)
            return {"error": str(exc) or type(exc).__name__}

    async def _drop(self, address: str) -> None:
        client = self._clients.pop(address, None)
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()

    def _timeline(self, now: float, statuses: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """Events per second per channel over the last TIMELINE_SAMPLES readings, cluster-wide: each
        broker counts what its own clients published, so the sum is the cluster's traffic."""
        totals: dict[str, int] = {}
        for st in statuses.values():
            for channel, count in (st.get("channels") or {}).items():
                totals[channel] = totals.get(channel, 0) + count
        self._history.append((now, totals))
        samples = list(self._history)
        pairs = list(itertools.pairwise(samples))
        busiest = sorted(totals, key=lambda ch: (-totals[ch], ch))[:TIMELINE_CHANNELS_MAX]
        # a broker that restarted or stopped answering lowers a total: clamp, never a negative rate
        series = {ch: [round(max(0, b.get(ch, 0) - a.get(ch, 0)) / max(t1 - t0, 1e-3), 2)
                       for (t0, a), (t1, b) in pairs] for ch in busiest}
        return {"times": [_iso(t) for (_, _), (t, _) in pairs], "series": series, "totals": totals}


def _peer_addresses(status: dict[str, Any]) -> list[str]:
    return [p["address"] for p in status.get("peers") or [] if p.get("state") == "open"]


def _broker(address: str, st: dict[str, Any]) -> dict[str, Any]:
    overlay = st.get("overlay") or {}
    keys = ("pubend", "clients", "subscriptions", "events_published", "events_delivered",
            "events_remote_delivered", "log_records", "log_bytes", "error")
    return {"address": address, "node_id": overlay.get("node_id"), "joined": overlay.get("joined"),
            **{k: st[k] for k in keys if k in st}}


def _links(statuses: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per pair of brokers with an open link, the RTT as each end measured it."""
    links: dict[tuple[str, str], dict[str, Any]] = {}
    for address, st in statuses.items():
        for p in st.get("peers") or []:
            if p.get("state") != "open":
                continue
            a, b = sorted((address, p["address"]))
            link = links.setdefault((a, b), {"a": a, "b": b, "rtt_ms": {}})
            if p.get("rtt_ms") is not None:
                link["rtt_ms"][address] = p["rtt_ms"]
    return list(links.values())


def _trees(statuses: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each tree as its brokers report it: the root, and every broker with its parent and role."""
    trees: dict[str, dict[str, Any]] = {}
    for address, st in statuses.items():
        for t in st.get("trees") or []:
            tree = trees.setdefault(t["name"], {"name": t["name"], "root": None, "nodes": []})
            if "root" in str(t.get("role")):
                tree["root"] = address
            tree["nodes"].append({"address": address, "parent": t.get("parent"), "role": t.get("role") or "",
                                  "member": bool(t.get("member")), "children": t.get("children") or []})
    return sorted(trees.values(), key=lambda t: t["name"])


class Dashboard:
    """The dashboard's routes on an aiohttp application."""

    def __init__(self, view: ClusterView, client_tls: ssl.SSLContext | None = None,
                 heartbeat_s: float = HEARTBEAT_S) -> None:
        self.view = view
        self._tls = client_tls
        self.heartbeat_s = heartbeat_s
        self._inspectors = 0
        self._page = resources.files("tidings.aio").joinpath("dashboard.html").read_bytes()

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/", self._index)
        app.router.add_get("/dashboard", self._index)
        app.router.add_get("/dashboard/stream", self._stream)
        app.router.add_get("/dashboard/inspect", self._inspect)

    async def _index(self, request: web.Request) -> web.Response:
        return web.Response(body=self._page, content_type="text/html", charset="utf-8")

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        response = await _sse(request)
        with contextlib.suppress(ConnectionResetError):  # the page was closed
            async with contextlib.aclosing(self.view.snapshots()) as snapshots:
                async for snap in snapshots:
                    await _send(response, "snapshot", snap)
        return response

    async def _inspect(self, request: web.Request) -> web.StreamResponse:
        if self._inspectors >= INSPECTORS_MAX:
            raise web.HTTPServiceUnavailable(text=f"{INSPECTORS_MAX} inspectors are open on this broker already\n")
        self._inspectors += 1
        try:
            response = await _sse(request)
            pattern = request.query.get("pattern") or "#"
            flt = request.query.get("filter") or None
            relay = asyncio.ensure_future(self._relay(response, pattern, flt))
            try:
                with contextlib.suppress(ConnectionResetError):  # the page was closed
                    await self._beat(response, relay)
            finally:  # the page went (or the broker stops): unsubscribe and close the client now
                relay.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionResetError):
                    await relay
            return response
        finally:
            self._inspectors -= 1

    async def _beat(self, response: web.StreamResponse, relay: asyncio.Future[None]) -> None:
        """Wait for `relay` to end, writing a heartbeat whenever it has been quiet for
        `heartbeat_s`: the write raises ConnectionResetError once the page has gone."""
        while not relay.done():
            done, _ = await asyncio.wait({relay}, timeout=self.heartbeat_s)
            if not done:
                await response.write(HEARTBEAT)
        relay.result()  # its ConnectionResetError (the page closed while an event was written)

    async def _relay(self, response: web.StreamResponse, pattern: str, flt: str | None) -> None:
        try:
            client = await Client.connect(self.view.broker_address, service=SERVICE, timeout=STATUS_TIMEOUT_S,
                                          tls=self._tls or False)
        except TidingsError as exc:
            await _send(response, "failed", {"error": str(exc)})
            return
        try:
            async with await client.subscribe(pattern, filter=flt, on_gap="event") as sub:
                await _send(response, "subscribed", {"pattern": pattern, "filter": flt})
                async for item in sub:
                    if isinstance(item, Gap):
                        await _send(response, "gap", {"after": item.after, "through": item.through})
                    else:
                        shown = replace(item, payload=item.payload[:PAYLOAD_SHOWN_BYTES_MAX]).to_json()
                        await _send(response, "event", shown | {"payload_bytes": len(item.payload)})
        except TidingsError as exc:
            await _send(response, "failed", {"error": str(exc)})
        finally:
            await client.close()


async def _sse(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    return response


def _send(response: web.StreamResponse, event: str, data: Any) -> Awaitable[None]:
    return response.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
