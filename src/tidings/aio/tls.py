"""TLS for the broker's port and its dials to other brokers, with the standard library's ssl.

One port carries clients and brokers, so one server context serves both: the broker's certificate
and key, TLS 1.2 at least. With a CA file the broker also checks the certificates of the brokers it
dials against that CA (and their host name or IP against the address dialled), and presents its own
certificate when dialling, so `--tls-require-client-cert` on every broker makes the links mutual
TLS: a process without a certificate from the cluster's CA cannot even complete a connection.
Clients check the broker's certificate against the system's CAs or the file given as --tls-ca.
`make_dev_certs` makes a development CA and one certificate for a set of hosts with the openssl
command line (the `cryptography` package is not a dependency).
"""

from __future__ import annotations

import ssl
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

CERT_DAYS = 30


@dataclass(frozen=True, slots=True)
class TlsFiles:
    cert: Path
    key: Path
    ca: Path | None = None  # what dialled brokers' (and with require_client_cert, callers') certificates must chain to
    require_client_cert: bool = False

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.cert, self.key)
        if self.require_client_cert:
            ctx.verify_mode = ssl.CERT_REQUIRED
            if self.ca is not None:
                ctx.load_verify_locations(self.ca)
            else:
                ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        return ctx

    def dial_context(self) -> ssl.SSLContext:
        """For this broker's connections to other brokers: verify them, present our certificate."""
        ctx = client_context(self.ca)
        ctx.load_cert_chain(self.cert, self.key)
        return ctx


def client_context(ca: Path | None = None, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    """A client's context: the broker's certificate checked against `ca` (else the system's CAs)."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=None if ca is None else str(ca))
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    return ctx


def _openssl(*args: str) -> None:
    out = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise OSError(f"openssl {args[0]} failed: {out.stderr.strip().splitlines()[-1:]}")


def make_dev_certs(directory: Path, hosts: list[str], days: int = CERT_DAYS) -> dict[str, Path]:
    """A development CA (ca.pem, ca.key) and a certificate for `hosts` signed by it (cert.pem,
    cert.key), good for serving and for dialling: give the same pair to every broker of a dev cluster."""
    import ipaddress  # noqa: PLC0415 - only here

    directory.mkdir(parents=True, exist_ok=True)
    names = []
    for host in hosts:
        try:
            ipaddress.ip_address(host)
            names.append(f"IP:{host}")
        except ValueError:
            names.append(f"DNS:{host}")
    paths = {k: directory / f"{k.replace('_', '.')}" for k in ("ca_pem", "ca_key", "cert_pem", "cert_key")}
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", str(paths["ca_key"]), "-out", str(paths["ca_pem"]), "-days", str(days),
             "-subj", "/CN=tidings development CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    with tempfile.TemporaryDirectory() as tmp:
        csr, ext = Path(tmp) / "cert.csr", Path(tmp) / "ext.cnf"
        ext.write_text(f"subjectAltName={','.join(names)}\nextendedKeyUsage=serverAuth,clientAuth\n"
                       "basicConstraints=CA:FALSE\n")
        _openssl("req", *ec, "-keyout", str(paths["cert_key"]), "-out", str(csr), "-subj", "/CN=tidings broker")
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(paths["ca_pem"]), "-CAkey", str(paths["ca_key"]),
                 "-CAcreateserial", "-out", str(paths["cert_pem"]), "-days", str(days), "-extfile", str(ext))
    for key in ("ca_key", "cert_key"):
        paths[key].chmod(0o600)
    return paths
