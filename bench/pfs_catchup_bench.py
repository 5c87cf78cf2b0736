#!/usr/bin/env python3
"""A rarely matching durable subscriber catching up, with and without the PFS (docs/durable.md).

  python bench/pfs_catchup_bench.py [--rate 10000] [--seconds 20] [--every 2000] [--rounds 1]

3 brokers (`tidings.testing.Cluster`). A durable subscriber on broker 2 subscribes to `pfsb/#` with
the filter `v = 0` and goes away; a publisher on broker 0 publishes --rate events a second for
--seconds (acknowledged), one in --every with `v = 0`. Then the subscriber resumes from its token:

- at broker 2, its own broker, whose persistent filtering subsystem recorded which ticks matched it:
  it asks broker 0 for those ticks only;
- at broker 1, which never saw it: the whole absence is asked for and refiltered (the paper's
  "reconnect anywhere").

For each, the time until every matching event has arrived, and what broker 0 did to answer:
`nack_records_read` (records read back from its log) and its CPU. Results are JSON lines.

`--root 1` names the channel so that its tree's rendez-vous point is broker 1: broker 2's stream
then comes through broker 1, a forwarder whose stream has long forgotten the absence, and what
broker 0 reads shows whether that forwarder fetched only the ticks the PFS asked for (a complete
nack, docs/delivery.md) or the whole absence. Without it the layout is whatever the ring gives
(`root` in the result says which broker it was). `--merge-ticks N` sets the brokers'
`nack_merge_ticks` (matching ticks closer than that are fetched as one range by the subscriber's
broker, the ticks between them with them).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from functools import cmp_to_key

import gd_bench
from tidings import sync
from tidings.core.multicast.trees import subscription_tree, tree_key
from tidings.core.overlay.node_id import closer
from tidings.testing import LOCAL_LIVENESS, Cluster

BATCH = 500


def root_of(cluster: Cluster, channel: str) -> int:
    """Which broker of `cluster` is the rendez-vous point of the tree `channel/#` joins."""
    key = tree_key(subscription_tree(f"{channel}/#"))
    ids = [int(b.node_id, 16) for b in cluster.brokers]
    order = sorted(range(len(ids)), key=cmp_to_key(lambda i, j: -1 if closer(key, ids[i], ids[j]) else 1))
    return order[0]


def channel_rooted_at(cluster: Cluster, root: int | None) -> str:
    """A channel's first level whose tree is rooted at broker `root` (None: the usual one)."""
    if root is None:
        return "pfsb"
    return next(c for c in (f"pfsb{i}" for i in range(1 << 20)) if root_of(cluster, c) == root)


def publish(address: str, channel: str, rate: int, seconds: float, every: int) -> list[int]:
    """Publish at `rate` for `seconds`; the ticks of the matching events."""
    matching: list[int] = []
    with sync.connect(address, follow_advice=False) as pub:
        t0 = time.monotonic()
        sent = 0
        while sent < rate * seconds:
            ahead = sent / rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)  # pacing the load, not synchronisation
            items = [(f"{channel}/a", b"x" * 100, {"v": (sent + i) % every}) for i in range(BATCH)]
            results = pub.publish_many(items)
            matching += [r.tick for i, r in enumerate(results) if (sent + i) % every == 0]
            sent += BATCH
    return matching


def catch_up(cluster: Cluster, channel: str, at: int, token: str, matching: list[int],
             limit_s: float) -> dict[str, Any]:
    origin = cluster[0]
    read0 = origin.status()["delivery"]["source"]["records_read"]
    nacks0 = cluster[at].status()["delivery"]
    forwarder0 = cluster[1].status()["delivery"]
    cpu0 = gd_bench.cpu_of({"origin": origin.pid})
    t0 = time.monotonic()
    with sync.connect(cluster[at].address, follow_advice=False) as client:
        sub = client.subscribe(f"{channel}/#", filter="v = 0", token=token)
        got = []
        while len(got) < len(matching) and time.monotonic() - t0 < limit_s:
            event = sub.get(timeout=limit_s)
            if event is None:
                break
            got.append(event.tick)
        seconds = time.monotonic() - t0
    status, forwarder = cluster[at].status(), cluster[1].status()["delivery"]
    return {"resumed_at": "own broker (PFS)" if at == 2 else "another broker (refilter)",
            "root": root_of(cluster, channel), "matching": len(matching), "received": len(got),
            "in_order": got == matching[:len(got)],
            "catchup_s": round(seconds, 3),
            "origin_records_read": origin.status()["delivery"]["source"]["records_read"] - read0,
            "origin_cpu_s": round((gd_bench.cpu_of({"origin": origin.pid})["origin"] - cpu0["origin"]) / 100, 2),
            "nacks_sent": status["delivery"]["nacks_sent"] - nacks0["nacks_sent"],
            "nack_ticks_sent": status["delivery"]["nack_ticks_sent"] - nacks0["nack_ticks_sent"],
            # broker 1's, when it is between (the tree's root with --root 1): what it asked of broker 0
            "broker1_nack_ticks_sent": forwarder["nack_ticks_sent"] - forwarder0["nack_ticks_sent"],
            "broker1_ticks_silenced": forwarder.get("complete_nack_ticks_silenced", 0)
            - forwarder0.get("complete_nack_ticks_silenced", 0),
            "pfs_catchups": status.get("pfs_catchups", 0), "pfs_ticks_silenced": status.get("pfs_ticks_silenced", 0)}


def one_round(rate: int, seconds: float, every: int, limit_s: float, root: int | None,
              merge_ticks: int | None, complete: bool = True) -> list[dict[str, Any]]:
    config = dict(LOCAL_LIVENESS) if merge_ticks is None else {**LOCAL_LIVENESS, "nack_merge_ticks": merge_ticks}
    if not complete:  # (else the brokers' default: complete nacks on)
        config["nack_complete"] = False
    with tempfile.TemporaryDirectory(prefix="pfs-catchup-") as tmp, Cluster(Path(tmp), 3, config) as cluster:
        channel = channel_rooted_at(cluster, root)
        with sync.connect(cluster[2].address, follow_advice=False) as client:
            sub = client.subscribe(f"{channel}/#", filter="v = 0", durable=True)
            token = sub.token
        matching = publish(cluster[0].address, channel, rate, seconds, every)
        deadline = time.monotonic() + limit_s
        while cluster[2].status().get("pfs_records_written", 0) < len(matching) and time.monotonic() < deadline:
            time.sleep(0.05)  # polling a status counter
        out = [catch_up(cluster, channel, 2, token, matching, limit_s),
               catch_up(cluster, channel, 1, token, matching, limit_s)]
    return [{"test": "pfs-catchup", "rate": rate, "seconds": seconds, "every": every, "nack_merge_ticks": merge_ticks,
             "nack_complete": complete, **r} for r in out]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=int, default=10_000, help="events a second")
    ap.add_argument("--seconds", type=float, default=20.0, help="how long the subscriber is away")
    ap.add_argument("--every", type=int, default=2000, help="one event in this many matches")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--limit-s", type=float, default=120.0)
    ap.add_argument("--root", type=int, choices=(0, 1, 2), help="the broker the tree is rooted at")
    ap.add_argument("--merge-ticks", type=int, help="the brokers' nack_merge_ticks (default: the configuration's)")
    ap.add_argument("--plain-nacks", action="store_true",
                    help="the brokers' nack_complete off (on by default): every nack plain (docs/delivery.md)")
    ap.add_argument("--out", default="bench/results/pfs_catchup_bench.jsonl")
    args = ap.parse_args()
    if args.rate < BATCH or args.seconds <= 0 or args.every < 1 or args.rounds < 1:
        ap.error(f"--rate is at least {BATCH}, --seconds positive, --every and --rounds at least 1")
    for _ in range(args.rounds):
        for result in one_round(args.rate, args.seconds, args.every, args.limit_s, args.root,
                                args.merge_ticks, not args.plain_nacks):
            line = json.dumps(result | gd_bench.context())
            print(line, flush=True)
            with open(args.out, "a") as f:
                f.write(line + "\n")


if __name__ == "__main__":
    main()
