"""`tidings cluster up N` / `down` / `restart I`: a local cluster of broker processes.

`up` starts N brokers as detached processes (their own session, stdin closed), each with its data
in DIR/broker-I, where its ready line goes to ready.json and its log to broker.log; the first one
starts a new overlay and the others join through it. It waits, with one deadline, for each ready
line and then for each broker to report itself joined, and writes DIR/cluster.json: each member's
index, pid, address, node id, data directory and join target, for `down` and `restart`. With
`--auth FILE` the brokers require a credential of every client, the status checks of `up` and
`restart` included: without one (`--credential` or $TIDINGS_CREDENTIAL) they stop at once saying
so, and a credential the brokers refuse ends the wait at once with their reason.

Which process runs a member is never taken from cluster.json alone: a member may have been
restarted by hand since. Every broker holds an exclusive lock on its data directory and writes its
pid into it (see storage/lock.py), so `down` stops whatever process holds each DIR/broker-I:
SIGTERM, a bounded wait for the directory to be free, then SIGKILL. Only a process that holds the
lock is signalled, so a recycled pid is never hit. `restart I` stops member I the same way and
starts it again on its data directory and address, joining through its recorded join target (or
another running member when that one is down).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tidings.cli.common import CREDENTIAL_ENV, EXIT_BROKER, EXIT_INPUT, CliError, emit
from tidings.storage.lock import holder

CLUSTER_FILE = "cluster.json"
MEMBER_GLOB = "broker-*"
POLL_S = 0.05
KILL_WAIT_S = 10.0  # after SIGKILL, how long the kernel may take to end a process


def add_parser(sub: Any) -> None:
    cl = sub.add_parser("cluster", help="run a local cluster of brokers (up N / down / restart I)")
    csub = cl.add_subparsers(dest="action", required=True)
    up = csub.add_parser("up", help="start N brokers in the background, joined in one overlay")
    up.add_argument("count", type=int, help="how many brokers")
    _data_option(up)
    up.add_argument("--base-port", type=int, default=7400,
                    help="the first broker's port, the others follow (0: free ports; default %(default)s)")
    up.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s)")
    up.add_argument("--config", help="TOML file given to every broker")
    up.add_argument("--auth", metavar="FILE", help="auth file given to every broker (docs/security.md)")
    up.add_argument("--credential", metavar="NAME:SECRET", default=os.environ.get(CREDENTIAL_ENV),
                    help="what `up` checks the brokers with when they have --auth (default $TIDINGS_CREDENTIAL)")
    up.add_argument("--timeout", type=float, default=60.0,
                    help="seconds to wait for the cluster (default %(default)s)")
    up.set_defaults(func=cmd_up)
    down = csub.add_parser("down", help="stop every broker of the cluster, also members restarted by hand")
    _data_option(down)
    down.add_argument("--timeout", type=float, default=15.0, help="seconds before SIGKILL (default %(default)s)")
    down.set_defaults(func=cmd_down)
    restart = csub.add_parser("restart", help="stop member I (if running) and start it again")
    restart.add_argument("index", type=int, help="the member's index (0 is the first broker)")
    restart.add_argument("--credential", metavar="NAME:SECRET", default=os.environ.get(CREDENTIAL_ENV),
                         help="what `restart` checks the broker with when it has --auth (default $TIDINGS_CREDENTIAL)")
    _data_option(restart)
    restart.add_argument("--timeout", type=float, default=60.0,
                         help="seconds to stop it (then SIGKILL) and, again, to have it back and joined "
                              "(default %(default)s)")
    restart.set_defaults(func=cmd_restart)


def _data_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", default="./data/cluster", help="the cluster's directory (default %(default)s)")


# ---- up ---------------------------------------------------------------------------------------------


def cmd_up(args: argparse.Namespace) -> int:
    if not 1 <= args.count <= 256:
        raise CliError("cluster up takes 1 to 256 brokers", EXIT_INPUT)
    if not 0 <= args.base_port <= 65535 - args.count:
        raise CliError("--base-port must leave room for every broker's port", EXIT_INPUT)
    if args.timeout <= 0:
        raise CliError("--timeout must be positive", EXIT_INPUT)
    _need_credential(args.auth, args.credential, "up")
    root = Path(args.data)
    running = _running(_member_dirs(root, _read_cluster(root)))
    if running:
        data, pid = next(iter(running.items()))
        raise CliError(f"a cluster is already up under {root} (a broker runs on {data.name}, pid {pid or '?'}); "
                       f"run `tidings cluster down --data {root}` first", EXIT_BROKER)
    root.mkdir(parents=True, exist_ok=True)
    config = str(Path(args.config).resolve()) if args.config else None
    auth = str(Path(args.auth).resolve()) if args.auth else None
    deadline = time.monotonic() + args.timeout
    spawned = [_spawn(root, 0, f"{args.host}:{_port(args, 0)}", None, config, auth)]
    try:
        _ready(spawned[0], deadline)
        spawned += [_spawn(root, i, f"{args.host}:{_port(args, i)}", spawned[0]["address"], config, auth)
                    for i in range(1, args.count)]
        for b in spawned[1:]:
            _ready(b, deadline)
        for b in spawned:
            _wait_joined(b, deadline, args.credential)
    except BaseException:
        _stop([Path(b["data"]) for b in spawned], 5.0, [b["_proc"] for b in spawned])
        raise
    brokers = [_record(b) for b in spawned]
    _write_cluster(root, {"config": config, "auth": auth, "brokers": brokers})
    emit({"addresses": [b["address"] for b in brokers], "node_ids": [b["node_id"] for b in brokers],
          "cluster": str(root / CLUSTER_FILE)})
    return 0


def _need_credential(auth: str | None, credential: str | None, action: str) -> None:
    """Brokers with an auth file answer no anonymous status request: `up` and `restart` could
    never see them joined, so say what is missing now rather than after --timeout."""
    if auth and not credential:
        raise CliError(f"cluster {action}: the brokers have --auth {auth}, so checking that they joined needs a "
                       f"credential: give --credential NAME:SECRET or set ${CREDENTIAL_ENV} (`tidings auth add NAME "
                       f"--file {auth}` creates one)", EXIT_INPUT)


def _port(args: argparse.Namespace, index: int) -> int:
    return 0 if args.base_port == 0 else int(args.base_port) + index


def _spawn(root: Path, index: int, listen: str, join: str | None, config: str | None,
           auth: str | None) -> dict[str, Any]:
    data = (root / f"broker-{index}").resolve()
    cmd = [sys.executable, "-m", "tidings.cli.main", "broker", "--data", str(data),
           "--listen", listen, "--log-level", "info"]
    if join is not None:
        cmd += ["--join", join]
    if config is not None:
        cmd += ["--config", config]
    if auth is not None:
        cmd += ["--auth", auth]
    data.mkdir(parents=True, exist_ok=True)
    out_path, log_path = data / "ready.json", data / "broker.log"
    with open(out_path, "wb") as out, open(log_path, "ab") as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return {"index": index, "pid": proc.pid, "data": str(data), "log": str(log_path.resolve()),
            "address": None, "node_id": None, "join": join, "_out": str(out_path), "_proc": proc}


def _record(b: dict[str, Any]) -> dict[str, Any]:
    """What cluster.json keeps of a member we started."""
    return {k: v for k, v in b.items() if not k.startswith("_")}


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
    from tidings.core.errors import AUTH_FAILED, AUTH_REQUIRED, TidingsError

    while True:
        try:
            with sync.connect(b["address"], service="tidings-cluster", timeout=5, credential=credential,
                              follow_advice=False) as client:
                overlay = client.status().get("overlay")
        except (TidingsError, OSError) as exc:  # not serving yet: wait on, unless the credential is refused
            if isinstance(exc, TidingsError) and exc.code in (AUTH_FAILED, AUTH_REQUIRED):
                raise CliError(f"broker {b['index']} ({b['address']}) refused the credential that checks it: "
                               f"{exc} ({exc.code})", EXIT_BROKER) from None
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


# ---- down and restart -------------------------------------------------------------------------------


def cmd_down(args: argparse.Namespace) -> int:
    if args.timeout < 0:
        raise CliError("--timeout must not be negative", EXIT_INPUT)
    root = Path(args.data)
    info = _read_cluster(root)
    dirs = _member_dirs(root, info)
    if info is None and not _running(dirs):
        raise CliError(f"no cluster to stop under {root} ({CLUSTER_FILE} not found, no broker running there)",
                       EXIT_BROKER)
    stopped, killed = _stop(dirs, args.timeout)
    (root / CLUSTER_FILE).unlink(missing_ok=True)
    emit({"stopped": stopped, "killed": killed, "already_gone": len(dirs) - stopped - killed})
    return 0


def cmd_restart(args: argparse.Namespace) -> int:
    if args.timeout <= 0:
        raise CliError("--timeout must be positive", EXIT_INPUT)
    root = Path(args.data)
    info = _read_cluster(root)
    if info is None:
        raise CliError(f"no cluster under {root} ({CLUSTER_FILE} not found); start one with "
                       f"`tidings cluster up N --data {root}`", EXIT_BROKER)
    brokers = info["brokers"]
    if not 0 <= args.index < len(brokers):
        raise CliError(f"the cluster under {root} has members 0 to {len(brokers) - 1}, not {args.index}",
                       EXIT_INPUT)
    member = brokers[args.index]
    _need_credential(info.get("auth"), args.credential, "restart")
    _stop([Path(member["data"])], args.timeout)
    running = _running([Path(b["data"]) for b in brokers])
    up = [b["address"] for b in brokers if b is not member and Path(b["data"]) in running]
    join = member.get("join") if member.get("join") in up else next(iter(up), None)
    b = _spawn(root, args.index, member["address"], join, info.get("config"), info.get("auth"))
    deadline = time.monotonic() + args.timeout
    try:
        _ready(b, deadline)
        _wait_joined(b, deadline, args.credential)
    except BaseException:
        _stop([Path(b["data"])], 5.0, [b["_proc"]])
        raise
    brokers[args.index] = {**_record(b), "join": member.get("join")}  # keep the member's own target
    _write_cluster(root, info)
    emit({"restarted": args.index, "address": b["address"], "pid": b["pid"], "joined_through": join})
    return 0


def _member_dirs(root: Path, info: dict[str, Any] | None) -> list[Path]:
    """Every member's data directory: those cluster.json names and every DIR/broker-I there is."""
    named = [Path(b["data"]) for b in info["brokers"]] if info is not None else []
    found = sorted(p.resolve() for p in root.glob(MEMBER_GLOB) if p.is_dir()) if root.is_dir() else []
    return list(dict.fromkeys([*named, *found]))


def _running(dirs: list[Path]) -> dict[Path, int]:
    """The data directories a broker holds, with its pid (0: held, pid not known yet)."""
    held = {d: holder(d) for d in dirs}
    return {d: pid for d, pid in held.items() if pid is not None}


def _stop(dirs: list[Path], timeout: float, children: list[subprocess.Popen[bytes]] | None = None
          ) -> tuple[int, int]:
    """SIGTERM the broker holding each of `dirs` (and each child of ours still running, which may
    not hold its directory yet), wait up to `timeout` s for every directory to be free and every
    child gone, then SIGKILL what is left. Returns how many directories were freed by SIGTERM and
    how many needed SIGKILL; raises CliError when one is still held after that."""
    kids = children or []
    for proc in kids:
        if proc.poll() is None:
            proc.terminate()
    signalled: dict[Path, int] = {}

    def pending() -> bool:
        held = _running(dirs)
        for d, pid in held.items():
            if pid and signalled.get(d) != pid:  # a new holder (restarted meanwhile) is signalled too
                _kill(pid, signal.SIGTERM)
                signalled[d] = pid
        return bool(held) or any(proc.poll() is None for proc in kids)

    _wait(pending, timeout)
    left = _running(dirs)
    for pid in left.values():
        if pid:
            _kill(pid, signal.SIGKILL)
    for proc in kids:
        if proc.poll() is None:
            proc.kill()
    _wait(lambda: bool(_running(dirs)) or any(proc.poll() is None for proc in kids), KILL_WAIT_S)
    stuck = _running(dirs)
    if stuck:
        data, pid = next(iter(stuck.items()))
        who = f"pid {pid}" if pid else "a process this user cannot inspect"
        raise CliError(f"{data} is still held by {who} after SIGTERM and SIGKILL", EXIT_BROKER)
    return len(set(signalled) - set(left)), len(left)


def _wait(busy: Any, timeout: float) -> None:
    """Poll `busy()` until it is false or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while busy() and time.monotonic() < deadline:
        time.sleep(POLL_S)


def _kill(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended between the probe and the signal
        os.kill(pid, sig)


def _read_cluster(root: Path) -> dict[str, Any] | None:
    path = root / CLUSTER_FILE
    try:
        info: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot read {path}: {exc}", EXIT_BROKER) from None
    return info


def _write_cluster(root: Path, info: dict[str, Any]) -> None:
    path = root / CLUSTER_FILE
    temp = path.with_name(path.name + ".tmp")
    temp.write_text(json.dumps(info, indent=2) + "\n")
    temp.replace(path)
