"""The durable paper's subscriber-broker crash and recovery (Gryphon durable, Figures 7-8), on real processes.

    python bench/durable_experiments.py [--rate 1000] [--subscribers 4] [--warm-s 5] [--down-s 10]
        [--after-s 15] [--plot docs/img/shb-crash.png]

Three brokers: the publisher's (PHB, broker 0), an intermediate, and the subscribers' (SHB, broker
2). One publisher at the PHB sends `--rate` events/s for the whole run; `--subscribers` durable
subscribers at the SHB receive every event and acknowledge what they took (the client's automatic
ack, once a second). After `--warm-s` the SHB is killed with kill -9; it is restarted `--down-s`
later, and each subscriber resumes there from the token it last held and catches up.

Sampled every 100 ms at the PHB: latestDelivered(p) (Td, what every connected subscriber has) and
released(p) (Tr, what every durable subscription acknowledged), each as seconds behind the
publisher's newest tick, and the PHB's CPU. Per subscriber: when it resumed, and when it had caught
up (it received an event published less than `CAUGHT_UP_S` before it arrived). Every event
acknowledged to the publisher must reach every subscriber exactly once, in order: the run says so,
and fails otherwise. One JSON line is appended to bench/results/durable_experiments.jsonl.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.dont_write_bytecode = True
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import netutil  # noqa: E402
from tidings import sync  # noqa: E402
from tidings.core.errors import TidingsError  # noqa: E402
from tidings.testing import LOCAL_LIVENESS, Cluster  # noqa: E402

SAMPLE_S = 0.1
CAUGHT_UP_S = 0.5  # a subscriber has caught up once an event reaches it this soon after it was published
DRAIN_S = 60.0
PAYLOAD = b"d" * 100
PUBLISH_EVERY_S = 0.01
# the channel's other trees (tidings.core.multicast.trees.publish_trees): plain subscribers at the
# intermediate keep them busy, or the pubend would count each as a tree that lost its members and
# hold Td and Tr for release_hold_ns (docs/durable.md)
OTHER_TREES = ("exp/a", "exp/a/#", "#")


class Subscriber(threading.Thread):
    """A durable subscriber that keeps its token, and resumes from it when its broker is back."""

    def __init__(self, address: str, pattern: str, stop: threading.Event, filter: str | None = None) -> None:
        super().__init__(daemon=True)
        self.address, self.pattern, self.stop, self.filter = address, pattern, stop, filter
        self.ticks: list[int] = []
        self.token: str | None = None
        self.resumed_at: list[float] = []
        self.caught_up_at: list[float] = []
        self.ready = threading.Event()
        # planned disconnections (bench/scalability.py): from `drop_at` (time.monotonic()) until
        # `drop_until`, the subscriber closes its connection every `drop_every_s` and resumes
        # `away_s` later with its token
        self.drop_at: float | None = None
        self.drop_until = self.drop_every_s = self.away_s = 0.0
        self.drops = 0

    def plan_drops(self, first_at: float, every_s: float, away_s: float, until: float) -> None:
        self.drop_every_s, self.away_s, self.drop_until = every_s, away_s, until
        self.drop_at = first_at if first_at < until else None

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                with sync.connect(self.address, follow_advice=False, timeout=2) as client:
                    sub = client.subscribe(self.pattern, filter=self.filter, token=self.token) if self.token else \
                        client.subscribe(self.pattern, filter=self.filter, durable=True)
                    self.token = sub.token
                    if self.ticks:
                        self.resumed_at.append(time.time())
                    self.ready.set()
                    behind = bool(self.ticks)
                    while not self.stop.is_set():
                        if self.drop_at is not None and time.monotonic() >= self.drop_at:
                            break  # a planned disconnection: the connection closes with the `with`
                        try:
                            ev = sub.get(timeout=0.5)
                        except TimeoutError:
                            continue  # nothing for half a second: look at `stop` again
                        if ev is None:
                            break
                        self.ticks.append(ev.tick)
                        self.token = sub.token
                        if behind and time.time() * 1e6 - ev.tick < CAUGHT_UP_S * 1e6:
                            self.caught_up_at.append(time.time())
                            behind = False
                if self.drop_at is not None and time.monotonic() >= self.drop_at:
                    self.drops += 1
                    self.drop_at += self.drop_every_s
                    if self.drop_at >= self.drop_until:
                        self.drop_at = None
                    self.stop.wait(self.away_s)
            except (TidingsError, OSError):
                self.stop.wait(0.2)  # its broker is down: try again


def keep(address: str, pattern: str, stop: threading.Event) -> None:
    with sync.connect(address, follow_advice=False) as client:
        sub = client.subscribe(pattern)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                sub.get(timeout=0.5)


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="durable-exp-") as tmp, \
            Cluster(Path(tmp), 3, LOCAL_LIVENESS | {"durable_save_interval_ns": 100_000_000,
                                                   "release_hold_ns": int(args.release_hold_s * 1e9)}) as cluster:
        phb, shb = cluster[0], cluster[2]
        stop = threading.Event()
        subs = [Subscriber(shb.address, "exp/#", stop) for _ in range(args.subscribers)]
        keepers = [threading.Thread(target=keep, args=(cluster[1].address, pattern, stop), daemon=True)
                   for pattern in OTHER_TREES]
        for k in keepers:
            k.start()
        for s in subs:
            s.start()
            s.ready.wait(10)
        acked: list[int] = []
        samples: list[dict[str, Any]] = []
        marks: dict[str, float] = {}

        def publish() -> None:  # in batches every 10 ms, so that the rate does not wait on each ack
            batch = max(1, round(args.rate * PUBLISH_EVERY_S))
            with sync.connect(phb.address, follow_advice=False) as pub:
                t0, n = time.monotonic(), 0
                while not stop.is_set() and time.monotonic() - t0 < args.warm_s + args.down_s + args.after_s:
                    due = t0 + n / args.rate
                    if due > time.monotonic():
                        time.sleep(due - time.monotonic())
                    acked.extend(r.tick for r in pub.publish_many([("exp/a", PAYLOAD)] * batch))
                    n += batch

        def sample() -> None:
            last = netutil.cpu_ticks(netutil.process_tree(phb.pid or 0)), time.monotonic()
            while not stop.wait(SAMPLE_S):
                with_cpu = netutil.cpu_ticks(netutil.process_tree(phb.pid or 0)), time.monotonic()
                cpu = 100 * (with_cpu[0] - last[0]) / netutil.CLOCK_TICKS_PER_S / (with_cpu[1] - last[1])
                last = with_cpu
                try:
                    st = phb.status()
                except (TidingsError, OSError):
                    continue
                head = acked[-1] if acked else 0
                d = st["delivery"]
                samples.append({"t": time.time(), "head": head, "delivered": min(d["delivered"], head),
                                "released": min(d["released"], head), "phb_cpu_pct": round(cpu, 1)})

        publisher = threading.Thread(target=publish, daemon=True)
        sampler = threading.Thread(target=sample, daemon=True)
        marks["start"] = time.time()
        publisher.start()
        sampler.start()
        time.sleep(args.warm_s)
        marks["kill"] = time.time()
        shb.kill()
        time.sleep(args.down_s)
        marks["restart"] = time.time()
        shb.start()
        publisher.join()
        marks["published"] = time.time()
        deadline = time.monotonic() + DRAIN_S
        while time.monotonic() < deadline and any(len(s.ticks) < len(acked) for s in subs):
            time.sleep(0.1)
        stop.set()
        for t in (*subs, *keepers, sampler):
            t.join(5)
        problems = []
        for k, s in enumerate(subs):
            got = [t for t in s.ticks if t in set(acked)]
            if got != acked:
                problems.append(f"subscriber {k}: {len(set(acked) - set(got))} missing, "
                                f"{len(got) - len(set(got))} repeated, in order {got == sorted(got)}")
        catchup = [round(c - r, 2) for s in subs for r, c in zip(s.resumed_at, s.caught_up_at, strict=False)]
        resumed = [len(s.resumed_at) for s in subs]
        return {"test": "shb-crash", "rate_per_s": args.rate, "subscribers": args.subscribers,
                "warm_s": args.warm_s, "down_s": args.down_s, "after_s": args.after_s,
                "release_hold_s": args.release_hold_s, "acked": len(acked),
                "resumed": resumed, "catchup_s": catchup, "problems": problems, "marks": marks, "samples": samples,
                "loadavg": [round(x, 2) for x in __import__("os").getloadavg()],
                "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def plot(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = result["marks"]["start"]
    xs = [s["t"] - t0 for s in result["samples"]]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for key, label in (("delivered", "latestDelivered(p) (Td)"), ("released", "released(p) (Tr)")):
        # 0: not known yet (a tree whose new member has not acknowledged anything): left out
        top.plot(xs, [(s["head"] - s[key]) / 1e6 if s[key] else float("nan") for s in result["samples"]],
                 label=label)
    top.set_ylabel("seconds behind the newest event")
    top.legend()
    bottom.plot(xs, [s["phb_cpu_pct"] for s in result["samples"]], color="tab:gray")
    bottom.set_ylabel("publisher's broker CPU %")
    bottom.set_xlabel("seconds")
    for ax in (top, bottom):
        for name in ("kill", "restart"):
            ax.axvline(result["marks"][name] - t0, color="tab:red", linestyle=":")
    top.set_title(f"SHB killed at {result['marks']['kill'] - t0:.0f} s, restarted at "
                  f"{result['marks']['restart'] - t0:.0f} s; {result['subscribers']} durable subscribers, "
                  f"{result['rate_per_s']:.0f} events/s")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=1000.0, help="events per second published")
    ap.add_argument("--subscribers", type=int, default=4)
    ap.add_argument("--warm-s", type=float, default=5.0)
    ap.add_argument("--down-s", type=float, default=10.0, help="kill -9 of the SHB to its restart")
    ap.add_argument("--after-s", type=float, default=15.0, help="publishing after the restart")
    ap.add_argument("--release-hold-s", type=float, default=300.0,
                    help="release_hold_ns in seconds: how long a new root, or a tree that lost its members, "
                         "holds Td and Tr")
    ap.add_argument("--out", default=str(HERE / "results" / "durable_experiments.jsonl"))
    ap.add_argument("--plot", default=None, help="PNG path (needs matplotlib)")
    args = ap.parse_args()
    result = run(args)
    with open(args.out, "a") as fh:
        fh.write(json.dumps(result) + "\n")
    summary = {k: v for k, v in result.items() if k not in ("samples", "marks")}
    print(json.dumps(summary))
    if args.plot:
        plot(result, args.plot)
    sys.exit(1 if result["problems"] else 0)


if __name__ == "__main__":
    main()
