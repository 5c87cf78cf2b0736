"""What a first user hit with the `tidings` command, each as a real process against a real broker
(or a real something-else): stdin lines published as they arrive, one bad line not spoiling the
rest, "not a tidings broker" quickly with exit code 3, Ctrl-C during connect, a readiness signal,
and input checks with one clear line each."""

import json
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tidings import BrokerError, BrokerUnreachable, ConnectionClosed, NotABroker, sync
from tidings.testing import wait_for

pytestmark = pytest.mark.integration
TIDINGS = [sys.executable, "-m", "tidings.cli.main"]


def at_a_terminal() -> None:
    """Ctrl-C reaches the command as at a terminal: a suite started in the background (`make test
    &`) runs with SIGINT ignored, which its children would inherit."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def tidings(*args, stdin=None, timeout=30):
    return subprocess.run([*TIDINGS, *args], input=stdin, check=False, capture_output=True, text=True,
                          timeout=timeout)


def read_line(stream, timeout=10.0):
    ready, _, _ = select.select([stream], [], [], timeout)
    assert ready, f"no line within {timeout} s"
    return stream.readline()


def test_pub_publishes_each_stdin_line_as_it_arrives(broker):
    proc = subprocess.Popen([*TIDINGS, "pub", "--broker", broker.address, "edges/lines"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=at_a_terminal)  # noqa: PLW1509
    try:
        acks = []
        for text in ("one", "two"):
            proc.stdin.write(text + "\n")
            proc.stdin.flush()  # stdin stays open, as with `tail -f`: each line must still go out now
            acks.append(json.loads(read_line(proc.stdout)))
        proc.stdin.write("x" * (1024 * 1024 + 1) + "\n")  # past event_bytes_max: an error for that line only
        proc.stdin.write("three\n")
        proc.stdin.flush()
        acks.append(json.loads(read_line(proc.stdout)))
        assert "stdin line 3: payload of 1048577 bytes exceeds event_bytes_max" in read_line(proc.stderr)
        proc.stdin.write("four\n")
        proc.stdin.flush()
        acks.append(json.loads(read_line(proc.stdout)))
        proc.send_signal(signal.SIGINT)  # Ctrl-C: every line typed so far is already acknowledged
        assert proc.wait(10) == 130
    finally:
        proc.kill()
        proc.communicate()
    assert [a["pubend"] for a in acks] == [broker.pubend] * 4
    with sync.connect(broker.address) as c:
        assert [e.payload for e in c.read("edges/lines")] == [b"one", b"two", b"three", b"four"]
    out = tidings("pub", "--broker", broker.address, "edges/file", stdin="a\n" + "y" * (1024 * 1024 + 1) + "\nb\n")
    assert out.returncode == 2 and len(out.stdout.splitlines()) == 2
    assert out.stderr.startswith("tidings: error: stdin line 2:") and out.stderr.count("\n") == 1


class _Silent(threading.Thread):
    """A TCP server that accepts and then says nothing (or `banner`), like sshd or a stuck service."""

    def __init__(self, banner=b""):
        super().__init__(daemon=True)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.banner = banner
        self.accepted = threading.Event()
        self.conns = []

    def run(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            self.accepted.set()
            if self.banner:
                conn.sendall(self.banner)

    def close(self):
        self.sock.close()
        for conn in self.conns:
            conn.close()


@pytest.fixture
def silent():
    server = _Silent()
    server.start()
    yield server
    server.close()


@pytest.fixture
def ssh_like():
    server = _Silent(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
    server.start()
    yield server
    server.close()


@pytest.fixture
def http_server():
    class Hello(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("kind", ["silent", "ssh_like", "http_server"])
def test_not_a_tidings_broker_is_said_quickly_with_exit_code_3(kind, request):
    server = request.getfixturevalue(kind)
    address = server if isinstance(server, str) else server.address
    # every command against the impostor that answers at once, one against those that wait for
    # more input (each of those takes the 3 s answer timeout)
    commands = [["status"], ["sub", "x", "--timeout", "30"], ["pub", "x", "y"]]
    if kind != "ssh_like":
        commands = commands[:1]

    def timed(command: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
        started = time.monotonic()
        out = tidings(*command, "--broker", address)
        return time.monotonic() - started, out

    with ThreadPoolExecutor(len(commands)) as pool:  # side by side: each may wait out the answer timeout
        results = list(pool.map(timed, commands))
    for took, out in results:
        # well under sub's --timeout 30: the impostor was recognised, not waited out (the bound leaves
        # room for three interpreters starting at once on a busy 2-core machine, which took over 6 s)
        assert took < 15
        assert out.returncode == 3, out.stderr
        assert out.stderr.startswith(f"tidings: error: {address} is not a tidings broker")
        assert out.stderr.count("\n") == 1 and "frame of" not in out.stderr
    with pytest.raises(NotABroker) as err:
        sync.connect(address)
    assert err.value.code == "not-a-broker" and isinstance(err.value, ConnectionClosed)


def test_a_refused_connection_is_broker_unreachable(free_port):
    with pytest.raises(BrokerUnreachable, match="cannot connect to broker") as err:
        sync.connect(f"127.0.0.1:{free_port}", timeout=2)
    assert err.value.code == "unreachable" and not isinstance(err.value, NotABroker)
    out = tidings("status", "--broker", f"127.0.0.1:{free_port}")
    assert out.returncode == 3 and "cannot connect to broker" in out.stderr


def test_ctrl_c_during_connect_is_quiet(silent):
    proc = subprocess.Popen([*TIDINGS, "sub", "x", "--broker", silent.address], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=at_a_terminal)  # noqa: PLW1509
    assert silent.accepted.wait(10)
    time.sleep(0.2)  # connected, waiting for a WELCOME that never comes: the moment under test
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 130
    assert out == "" and "Task was destroyed" not in err and "Traceback" not in err, err


def test_sub_says_when_it_is_subscribed(broker, tmp_path):
    ready = tmp_path / "ready.json"
    proc = subprocess.Popen([*TIDINGS, "sub", "edges/ready/#", "--broker", broker.address, "--count", "1",
                             "--ready-file", str(ready)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(ready.exists, 20, what="the ready file")
        info = json.loads(ready.read_text())
        assert info["pattern"] == "edges/ready/#" and isinstance(info["position"], int)
        assert tidings("pub", "--broker", broker.address, "edges/ready/1", "hello").returncode == 0
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0 and json.loads(out)["payload"] == "hello"
    assert f"subscribed to edges/ready/# at {broker.address}" in err


def test_sub_ending_at_timeout_exits_4(broker):
    tidings("pub", "--broker", broker.address, "edges/t", "one")
    out = tidings("sub", "--broker", broker.address, "edges/t", "--from", "start", "--count", "1", "--timeout", "20")
    assert out.returncode == 0 and len(out.stdout.splitlines()) == 1
    started = time.monotonic()
    out = tidings("sub", "--broker", broker.address, "edges/t", "--from", "start", "--count", "2", "--timeout", "1")
    assert out.returncode == 4 and len(out.stdout.splitlines()) == 1 and time.monotonic() - started < 10


@pytest.mark.parametrize(("args", "words"), [
    (["sub", "a", "--count", "0"], "--count must be at least 1"),
    (["sub", "a", "--count", "-3"], "--count must be at least 1"),
    (["sub", "a", "--timeout", "0"], "--timeout must be a positive"),
    (["sub", "a", "--timeout", "-1"], "--timeout must be a positive"),
    (["sub", "a", "--durable", "n", "--failover", "127.0.0.1:1"], "cannot take a --durable NAME"),
    (["sub", "a", "--order", "total", "--failover", "127.0.0.1:1"], "cannot resume a total-order"),
    (["sub", "a", "--failover", "nothost"], "--failover: "),
    (["status", "--connect-timeout", "0"], "--connect-timeout must be a positive"),
    (["pub", "a", "x", "--attr", "a b=3"], "cannot be used in a filter"),
    (["pub", "a", "x", "--attr", "1a=3"], "cannot be used in a filter"),
    (["pub", "a", "x", "--attr", "and=3"], "cannot be used in a filter"),
    (["pub", "a", "x", "--attr", "a=1", "--attr", "a=2"], "--attr a is given twice"),
    (["pub", "a", "x", "--attr", "s=" + "v" * 5000], "longer than 4096"),
    (["demo", "--hosts", "0"], "--hosts must be at least 1"),
    (["demo", "--brokers", "-1"], "--brokers must be at least 1"),
])
def test_input_checks(shared_broker, args, words):
    broker = shared_broker
    if args[0] == "demo":
        args = [*args[:1], "--data", str(broker.data.parent / "demo"), *args[1:]]
    out = tidings(*args[:1], *([] if args[0] == "demo" else ["--broker", broker.address]), *args[1:])
    assert out.returncode == 2, out.stderr
    assert words in out.stderr and out.stderr.count("\n") == 1 and out.stderr.startswith("tidings: error:")


def test_a_dotted_attribute_name_is_fine_and_usable_in_a_filter(broker):
    assert tidings("pub", "--broker", broker.address, "edges/attr", "x", "--attr", "cpu.load_1=2.5").returncode == 0
    out = tidings("sub", "--broker", broker.address, "edges/attr", "--from", "start", "--count", "1",
                  "--filter", "cpu.load_1 > 2", "--timeout", "20")
    assert out.returncode == 0 and json.loads(out.stdout)["attributes"] == {"cpu.load_1": 2.5}


def test_help_texts():
    sub_help = tidings("sub", "--help").stdout
    assert "stamped on published events" not in sub_help and "FROM_" not in sub_help
    assert "--from START" in sub_help and "+ matches one segment" in sub_help and "code 4" in sub_help
    assert "stamped on published events" not in tidings("status", "--help").stdout
    pub_help = tidings("pub", "--help").stdout
    assert "stamped on published events" in pub_help and "empty ones" in pub_help
    top = tidings("--help").stdout
    assert "run a broker, a monitoring" not in top and "PLDB pipeline" in top
    broker_help = " ".join(tidings("broker", "--help").stdout.split())
    assert "--join-timeout SECONDS" in broker_help
    assert "--log-level {debug,info,warning,error} the least severe log lines" in broker_help
    assert "(default info)" in broker_help
    assert "restart I" in top or "restart" in tidings("cluster", "--help").stdout



def test_tls_dev_certs_keeps_an_existing_ca_unless_forced_and_checks_days(tmp_path):
    made = tidings("tls", "dev-certs", "--dir", str(tmp_path / "tls"))
    assert made.returncode == 0, made.stderr
    ca = (tmp_path / "tls" / "ca.pem").read_bytes()
    again = tidings("tls", "dev-certs", "--dir", str(tmp_path / "tls"))
    assert again.returncode == 2 and "ca.pem exists already" in again.stderr and "--force" in again.stderr
    assert (tmp_path / "tls" / "ca.pem").read_bytes() == ca  # untouched
    forced = tidings("tls", "dev-certs", "--dir", str(tmp_path / "tls"), "--force")
    assert forced.returncode == 0 and "replacing the CA" in forced.stderr
    assert (tmp_path / "tls" / "ca.pem").read_bytes() != ca
    for days in ("-1", "0", "x", "1.5"):
        bad = tidings("tls", "dev-certs", "--dir", str(tmp_path / "other"), "--days", days)
        assert bad.returncode == 2 and "--days: must be a whole number of days" in bad.stderr, bad.stderr
        assert "openssl" not in bad.stderr.lower() and not (tmp_path / "other").exists()


def test_auth_add_writes_deny_rules_and_limits_and_auth_remove_takes_an_identity_out(tmp_path):
    from tidings.aio.auth_file import load_policy

    path = tmp_path / "auth.toml"
    added = tidings("auth", "add", "loadmon", "--file", str(path), "--publish", "load/#", "--deny-publish",
                    "load/secret/#", "--subscribe", "#", "--deny-subscribe", "private/#",
                    "--limit", "publish_events_per_s=50", "--limit", "connections_max=3")
    assert added.returncode == 0, added.stderr
    loadmon = json.loads(added.stdout)["credential"]
    other = json.loads(tidings("auth", "add", "viewer", "--file", str(path), "--subscribe", "load/#").stdout)
    policy = load_policy(path)
    limits = policy.identities["loadmon"].limits
    assert (limits.publish_events_per_s, limits.connections_max) == (50, 3)
    for args, words in ((["--limit", "nope=1"], "KEY one of connections_max"),
                        (["--limit", "connections_max=0"], "must be a positive integer"),
                        (["--limit", "connections_max"], "KEY=VALUE"),
                        (["--deny-publish", "a/#/b"], "'#' must be the last segment")):
        bad = tidings("auth", "add", "x", "--file", str(path), *args)
        assert bad.returncode == 2 and words in bad.stderr, bad.stderr
    assert "x" not in load_policy(path).identities  # nothing half written

    from tidings.testing import BrokerProcess

    with BrokerProcess(tmp_path / "b", args=["--auth", str(path)], credential=loadmon) as broker:
        with sync.connect(broker.address, credential=loadmon) as client:
            client.publish("load/h1", b"1")
            with pytest.raises(BrokerError) as denied:
                client.publish("load/secret/h1", b"2")
            assert denied.value.code == "forbidden"
            with pytest.raises(BrokerError) as denied:
                client.subscribe("#")  # shares private/# with the deny rule
            assert denied.value.code == "forbidden"
        removed = tidings("auth", "remove", "loadmon", "--file", str(path))
        assert removed.returncode == 0 and json.loads(removed.stdout) == {
            "removed": "loadmon", "rules_removed": 4, "file": str(path)}
        assert set(load_policy(path).identities) == {"viewer"} and "loadmon" not in path.read_text()
        broker.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: refused(broker.address, loadmon), 20, what="loadmon refused after the reload")
        with sync.connect(broker.address, credential=other["credential"]) as viewer:
            viewer.subscribe("load/#").close()
    unknown = tidings("auth", "remove", "loadmon", "--file", str(path))
    assert unknown.returncode == 2 and "no identity 'loadmon'" in unknown.stderr and "viewer" in unknown.stderr


def refused(address, credential):
    try:
        sync.connect(address, credential=credential, timeout=5).close()
    except BrokerError as exc:
        return exc.code == "auth-failed"
    return False


def test_pub_says_when_service_is_overridden_by_the_identity(tmp_path):
    from tidings.aio.auth_file import add_identity
    from tidings.core.auth.credentials import KdfParams
    from tidings.testing import BrokerProcess

    path = tmp_path / "auth.toml"
    cred = str(add_identity(path, "loadmon", [], ["#"], ["#"], KdfParams(n=1 << 10)))
    with BrokerProcess(tmp_path / "b", args=["--auth", str(path)], credential=cred) as broker:
        out = tidings("pub", "--broker", broker.address, "--credential", cred, "--service", "forged", "c", "x")
        assert out.returncode == 0, out.stderr
        assert out.stderr.count("the events' source is the authenticated identity loadmon, not --service forged") == 1
        quiet = tidings("pub", "--broker", broker.address, "--credential", cred, "c", "y")
        assert quiet.returncode == 0 and quiet.stderr == ""


def test_the_cli_says_when_it_moves_to_another_broker(tmp_path):
    from tidings.testing import LOCAL_LIVENESS, Cluster

    with Cluster(tmp_path, 2, LOCAL_LIVENESS) as cluster:
        leaving, staying = cluster[0], cluster[1]
        proc = subprocess.Popen([*TIDINGS, "pub", "--broker", leaving.address, "moves/x"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            proc.stdin.write("before\n")
            proc.stdin.flush()
            assert json.loads(read_line(proc.stdout))["pubend"] == leaving.pubend
            leaving.proc.send_signal(signal.SIGTERM)  # it drains: its clients are advised to move
            said = read_line(proc.stderr, 20)
            assert said == f"tidings: moved from broker {leaving.address} to {staying.address} " \
                           f"(route advice: draining)\n"
            proc.stdin.write("after\n")
            proc.stdin.flush()
            assert json.loads(read_line(proc.stdout))["pubend"] == staying.pubend
        finally:
            proc.kill()
            proc.wait(10)
