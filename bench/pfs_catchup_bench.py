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

import gd_bench
from tidings import sync
from tidings.testing import LOCAL_LIVENESS, Cluster

BATCH = 500


def publish(address: str, rate: int, seconds: float, every: int) -> list[int]:
    """Publish at `rate` for `seconds`; the ticks of the matching events."""
    matching: list[int] = []
    with sync.connect(address, follow_advice=False) as pub:
        t0 = time.monotonic()
        sent = 0
        while sent < rate * seconds:
            ahead = sent / rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)  # pacing the load, not synchronisation
            items = [("pfsb/a", b"x" * 100, {"v": (sent + i) % every}) for i in range(BATCH)]
            results = pub.publish_many(items)
            matching += [r.tick for i, r in enumerate(results) if (sent + i) % every == 0]
            sent += BATCH
    return matching


def catch_up(cluster: Cluster, at: int, token: str, matching: list[int], limit_s: float) -> dict[str, Any]:
    origin = cluster[0]
    read0 = origin.status()["delivery"]["source"]["records_read"]
    nacks0 = cluster[at].status()["delivery"]
    cpu0 = gd_bench.cpu_of({"origin": origin.pid})
    t0 = time.monotonic()
    with sync.connect(cluster[at].address, follow_advice=False) as client:
        sub = client.subscribe("pfsb/#", filter="v = 0", token=token)
        got = []
        while len(got) < len(matching) and time.monotonic() - t0 < limit_s:
            event = sub.get(timeout=limit_s)
            if event is None:
                break
            got.append(event.tick)
        seconds = time.monotonic() - t0
    status = cluster[at].status()
    return {"resumed_at": "own broker (PFS)" if at == 2 else "another broker (refilter)",
            "matching": len(matching), "received": len(got), "in_order": got == matching[:len(got)],
            "catchup_s": round(seconds, 3),
            "origin_records_read": origin.status()["delivery"]["source"]["records_read"] - read0,
            "origin_cpu_s": round((gd_bench.cpu_of({"origin": origin.pid})["origin"] - cpu0["origin"]) / 100, 2),
            "nacks_sent": status["delivery"]["nacks_sent"] - nacks0["nacks_sent"],
            "nack_ticks_sent": status["delivery"]["nack_ticks_sent"] - nacks0["nack_ticks_sent"],
            "pfs_catchups": status.get("pfs_catchups", 0), "pfs_ticks_silenced": status.get("pfs_ticks_silenced", 0)}


def one_round(rate: int, seconds: float, every: int, limit_s: float) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="pfs-catchup-") as tmp, Cluster(Path(tmp), 3, LOCAL_LIVENESS) as cluster:
        with sync.connect(cluster[2].address, follow_advice=False) as client:
            sub = client.subscribe("pfsb/#", filter="v = 0", durable=True)
            token = sub.token
        matching = publish(cluster[0].address, rate, seconds, every)
        deadline = time.monotonic() + limit_s
        while cluster[2].status().get("pfs_records_written", 0) < len(matching) and time.monotonic() < deadline:
            time.sleep(0.05)  # polling a status counter
        out = [catch_up(cluster, 2, token, matching, limit_s), catch_up(cluster, 1, token, matching, limit_s)]
    return [{"test": "pfs-catchup", "rate": rate, "seconds": seconds, "every": every, **r} for r in out]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=int, default=10_000, help="events a second")
    ap.add_argument("--seconds", type=float, default=20.0, help="how long the subscriber is away")
    ap.add_argument("--every", type=int, default=2000, help="one event in this many matches")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--limit-s", type=float, default=120.0)
    ap.add_argument("--out", default="bench/results/pfs_catchup_bench.jsonl")
    args = ap.parse_args()
    if args.rate < BATCH or args.seconds <= 0 or args.every < 1 or args.rounds < 1:
        ap.error(f"--rate is at least {BATCH}, --seconds positive, --every and --rounds at least 1")
    for _ in range(args.rounds):
        for result in one_round(args.rate, args.seconds, args.every, args.limit_s):
            line = json.dumps(result | gd_bench.context())
            print(line, flush=True)
            with open(args.out, "a") as f:
                f.write(line + "\n")


if __name__ == "__main__":
    main()
