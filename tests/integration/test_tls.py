"""TLS with real processes: clients to a broker (checked against the dev CA; plaintext and
untrusting clients fail), and a cluster whose brokers require each other's certificates (mutual
TLS) while delivering across the overlay, also with the cluster credential on top."""

import json
import subprocess
import sys

import pytest

from tidings import sync
from tidings.aio.auth_file import add_identity
from tidings.aio.tls import client_context
from tidings.client.client import ConnectionClosed
from tidings.core.auth.credentials import KdfParams
from tidings.testing import BrokerProcess, Cluster

from .test_cluster_bad_input import wait_in_tree

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    out = tmp_path_factory.mktemp("tls")
    done = subprocess.run([sys.executable, "-m", "tidings.cli.main", "tls", "dev-certs", "--dir", str(out)],
                          capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def tls_args(certs, mutual=False):
    args = ["--tls-cert", certs["cert_pem"], "--tls-key", certs["cert_key"], "--tls-ca", certs["ca_pem"]]
    return args + (["--tls-require-client-cert"] if mutual else [])


def test_clients_over_tls(tmp_path, certs):
    trusted = client_context(certs["ca_pem"])
    with BrokerProcess(tmp_path / "b", args=tls_args(certs), tls=trusted) as broker:
        with sync.connect(broker.address, tls=trusted) as client, client.subscribe("t/#") as sub:
            tick = client.publish("t/1", b"secret payload").tick
            assert sub.get(10).tick == tick
        with pytest.raises(ConnectionClosed):  # a plaintext HELLO is no TLS handshake: dropped
            sync.connect(broker.address, timeout=5)
        with pytest.raises(ConnectionClosed, match="CERTIFICATE_VERIFY_FAILED"):
            sync.connect(broker.address, tls=True, timeout=5)  # the system's CAs do not know the dev CA
        out = subprocess.run([sys.executable, "-m", "tidings.cli.main", "pub", "--broker", broker.address,
                              "--tls-ca", certs["ca_pem"], "t/2", "from the cli"],
                             capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 0, out.stderr


def test_a_cluster_over_mutual_tls_with_the_credential(tmp_path, certs):
    auth = tmp_path / "auth.toml"
    admin = str(add_identity(auth, "admin", [], ["#"], ["#"], KdfParams(n=1 << 10)))
    mine = client_context(certs["ca_pem"], certs["cert_pem"], certs["cert_key"])
    with Cluster(tmp_path, 2, args=[*tls_args(certs, mutual=True), "--auth", str(auth)], credential=admin,
                 tls=mine) as cluster:
        with sync.connect(cluster[1].address, credential=admin, tls=mine) as sub_client, \
                sync.connect(cluster[0].address, credential=admin, tls=mine) as pub_client:
            sub = sub_client.subscribe("m/#")
            wait_in_tree(cluster, cluster[1], "m/#")
            tick = pub_client.publish("m/1", b"across").tick
            assert sub.get(10).tick == tick
        no_cert = client_context(certs["ca_pem"])
        with pytest.raises(ConnectionClosed), \
                sync.connect(cluster[0].address, credential=admin, tls=no_cert, timeout=5) as c:
            c.status()  # no client certificate: the broker ends the TLS session
