"""`tidings cluster up N` / `tidings cluster down`: a local cluster of broker processes.

`up` starts N brokers as detached processes (their own session, stdin closed), each with its data
in DIR/broker-N, where its ready line goes to ready.json and its log to broker.log; the first one
starts a new overlay and the others join through it. It waits,
with one deadline, for each ready line and then for each broker to report itself joined, and
writes DIR/cluster.json: what `down` needs to find the processes again (pid, address, node id, data
directory). `down` sends SIGTERM, waits, then SIGKILLs what is left, and removes cluster.json. A pid
is only signalled while its command line still names its data directory, so a recycled pid is
never hit.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tidings.cli.common import CREDENTIAL_ENV, EXIT_BROKER, EXIT_INPUT, CliError, emit

CLUSTER_FILE = "cluster.json"
POLL_S = 0.05


def add_parser(sub: Any) -> None:
    cl = sub.add_parser("cluster", help="run a local cluster of brokers (up N / down)")
    csub = cl.add_subparsers(dest="action", required=True)
    up = csub.add_parser("up", help="start N brokers in the background, joined in one overlay")
    up.add_argument("count", type=int, help="how many brokers")
    up.add_argument("--data", default="./data/cluster", help="directory for the brokers (default %(default)s)")
    up.add_argument("--base-port", type=int, default=7400,
                    help="the first broker's port, the others follow (0: free ports; default %(default)s)")
    up.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s)")
    up.add_argument("--config", help="TOML file given to every broker")
    up.add_argument("--auth", metavar="FILE", help="auth file given to every broker (docs/security.md)")
    up.add_argument("--credential", metavar="NAME:SECRET", default=os.environ.get(CREDENTIAL_ENV),
                    help="what `up` checks the brokers with when they have --auth (default $TIDINGS_CREDENTIAL)")
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the cluster")
    up.set_defaults(func=cmd_up)
    down = csub.add_parser("down", help="stop the brokers `cluster up` started")
    down.add_argument("--data", default="./data/cluster", help="the directory given to `up`")
    down.add_argument("--timeout", type=float, default=15.0, help="seconds before SIGKILL")
    down.set_defaults(func=cmd_down)


# ---- up ---------------------------------------------------------------------------------------------


def cmd_up(args: argparse.Namespace) -> int:
    if not 1 <= args.count <= 256:
        raise CliError("cluster up takes 1 to 256 brokers", EXIT_INPUT)
    if not 0 <= args.base_port <= 65535 - args.count:
        raise CliError("--base-port must leave room for every broker's port", EXIT_INPUT)
    root = Path(args.data)
    previous = _read_cluster(root)
    if previous is not None and any(_alive(b) for b in previous["brokers"]):
        raise CliError(f"a cluster is already up under {root} (see {root / CLUSTER_FILE}); "
                       f"run `tidings cluster down --data {root}` first", EXIT_BROKER)
    root.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.timeout
    spawned = [_spawn(root, 0, args, None)]
    try:
        _ready(spawned[0], deadline)
        spawned += [_spawn(root, i, args, spawned[0]["address"]) for i in range(1, args.count)]
        for b in spawned[1:]:
            _ready(b, deadline)
        for b in spawned:
            _wait_joined(b, deadline, args.credential)
    except BaseException:
        _stop_all(spawned, timeout=5.0)
        raise
    brokers = [{k: v for k, v in b.items() if not k.startswith("_")} for b in spawned]
    (root / CLUSTER_FILE).write_text(json.dumps({"brokers": brokers}, indent=2) + "\n")
    emit({"addresses": [b["address"] for b in brokers], "node_ids": [b["node_id"] for b in brokers],
          "cluster": str(root / CLUSTER_FILE)})
    return 0


def _spawn(root: Path, index: int, args: argparse.Namespace, join: str | None) -> dict[str, Any]:
    data = (root / f"broker-{index}").resolve()
    port = 0 if args.base_port == 0 else args.base_port + index
    cmd = [sys.executable, "-m", "tidings.cli.main", "broker", "--data", str(data),
           "--listen", f"{args.host}:{port}", "--log-level", "warning"]
    if join is not None:
        cmd += ["--join", join]
    if args.config:
        cmd += ["--config", str(Path(args.config).resolve())]
    if args.auth:
        cmd += ["--auth", str(Path(args.auth).resolve())]
    data.mkdir(parents=True, exist_ok=True)
    out_path, log_path = data / "ready.json", data / "broker.log"
    with open(out_path, "wb") as out, open(log_path, "ab") as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return {"index": index, "pid": proc.pid, "data": str(data), "log": str(log_path.resolve()),
            "address": None, "node_id": None, "_out": str(out_path), "_proc": proc}


def _ready(b: dict[str, Any], deadline: float) -> None:
    """Wait for the broker's ready line, and note the address and node id it gives."""
    proc: subprocess.Popen[bytes] = b["_proc"]
    out = Path(b["_out"])
    while True:
        text = out.read_text(errors="replace")
        if text.endswith("\n"):
            info = json.loads(text.splitlines()[0])
            b.update(address=info["listening"], node_id=info.get("node_id"))
            return
        code = proc.poll()
        if code is not None:
            raise CliError(f"broker {b['index']} exited with code {code} before it was ready: "
                           f"{_tail(b['log'])}", EXIT_BROKER)
        if time.monotonic() > deadline:
            raise CliError(f"broker {b['index']} was not ready in time; see {b['log']}", EXIT_BROKER)
        time.sleep(POLL_S)


def _wait_joined(b: dict[str, Any], deadline: float, credential: str | None) -> None:
    """Wait until the broker reports itself part of the overlay (a broker without one counts)."""
    from tidings import sync
    from tidings.core.errors import TidingsError

    while True:
        try:
            with sync.connect(b["address"], service="tidings-cluster", timeout=5, credential=credential) as client:
                overlay = client.status().get("overlay")
        except (TidingsError, OSError):  # not serving yet: wait on
            overlay = {}
        if overlay is None or overlay.get("joined"):
            return
        if time.monotonic() > deadline:
            raise CliError(f"broker {b['index']} ({b['address']}) did not join the overlay in time; "
                           f"see {b['log']}", EXIT_BROKER)
        time.sleep(POLL_S * 4)


def _tail(path: str, lines: int = 3) -> str:
    try:
        text = Path(path).read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"


# ---- down -------------------------------------------------------------------------------------------


def cmd_down(args: argparse.Namespace) -> int:
    root = Path(args.data)
    info = _read_cluster(root)
    if info is None:
        raise CliError(f"no cluster to stop under {root} ({CLUSTER_FILE} not found)", EXIT_BROKER)
    running = [b for b in info["brokers"] if _alive(b)]
    killed = _stop_all(running, args.timeout)
    (root / CLUSTER_FILE).unlink()
    emit({"stopped": len(running) - len(killed), "killed": len(killed),
          "already_gone": len(info["brokers"]) - len(running)})
    return 0


def _stop_all(brokers: list[dict[str, Any]], timeout: float) -> list[dict[str, Any]]:
    """SIGTERM every broker, wait up to `timeout` s, SIGKILL the rest; returns those killed."""
    for b in brokers:
        _signal(b, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(_alive(b) for b in brokers) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    killed = [b for b in brokers if _alive(b)]
    for b in killed:
        _signal(b, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(_alive(b) for b in killed) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    return killed


def _signal(b: dict[str, Any], sig: int) -> None:
    proc = b.get("_proc")
    if proc is not None:  # our own child: Popen reaps it
        if proc.poll() is None:
            proc.send_signal(sig)
        return
    if _alive(b):
        os.kill(b["pid"], sig)


def _alive(b: dict[str, Any]) -> bool:
    """Whether the process is still the broker we started (not a zombie, not a recycled pid)."""
    proc = b.get("_proc")
    if proc is not None:
        return proc.poll() is None
    proc_dir = Path(f"/proc/{b['pid']}")
    try:
        cmdline = (proc_dir / "cmdline").read_bytes().split(b"\0")
        state = (proc_dir / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z" and os.fsencode(b["data"]) in cmdline


def _read_cluster(root: Path) -> dict[str, Any] | None:
    path = root / CLUSTER_FILE
    try:
        info: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot read {path}: {exc}", EXIT_BROKER) from None
    return info
