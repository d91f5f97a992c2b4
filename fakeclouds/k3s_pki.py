"""A SIMULATED k3s's certificates, laid out as k3s lays its own: a server CA that signs the API
server's serving certificate, a client CA that signs client certificates, and the admin client
certificate (`O=system:masters`, cluster-admin) that goes into the kubeconfig.

Made once per machine, under the machine's k3s state directory, by whichever comes first — the
engine for an image that ships k3s, the simulated `k3s server` on a host that got it from the
simulated installer (`python -m fakeclouds.k3s_pki DIR`), the simulated API server's first
connection (fakeclouds/k8s_api.py) — and never twice (a directory renamed into place). The serving
certificate is made for a set of SANs: 127.0.0.1 and localhost always (as k3s does), plus the
`--tls-san` values k3s was started with; a client dialling any other name fails verification,
as it would against a real k3s.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ALWAYS_SANS = ("127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
VALID = dt.timedelta(days=365)


@dataclass(frozen=True)
class Pki:
    """The files of one machine's k3s PKI (PEM)."""

    root: Path

    def path(self, name: str) -> Path:
        return self.root / name

    def read(self, name: str) -> bytes:
        return self.path(name).read_bytes()


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _cert(subject: x509.Name, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
          issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool,
          usage: x509.ObjectIdentifier | None = None, sans: list[x509.GeneralName] | None = None) -> bytes:
    now = dt.datetime.now(dt.UTC)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
         .not_valid_after(now + VALID)
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        b = b.add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), True)
    else:
        b = b.add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), True)
    if usage is not None:
        b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return b.sign(issuer_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def ensure(root: Path) -> Pki:
    """The PKI under `root`, made now unless it exists (safe against a concurrent maker)."""
    pki = Pki(root)
    if root.is_dir():
        return pki
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".pki-", dir=root.parent))
    server_ca_key, client_ca_key, admin_key = _key(), _key(), _key()
    # k3s names its CAs after the moment they were made: k3s-server-ca@<epoch>.
    stamp = int(dt.datetime.now(dt.UTC).timestamp())
    server_ca, client_ca = _name(f"k3s-server-ca@{stamp}"), _name(f"k3s-client-ca@{stamp}")
    files = {
        "server-ca.key": _pem_key(server_ca_key),
        "server-ca.crt": _cert(server_ca, server_ca_key, server_ca, server_ca_key, ca=True),
        "client-ca.key": _pem_key(client_ca_key),
        "client-ca.crt": _cert(client_ca, client_ca_key, client_ca, client_ca_key, ca=True),
        "client-admin.key": _pem_key(admin_key),
        "client-admin.crt": _cert(_name("system:admin", "system:masters"), admin_key, client_ca,
                                  client_ca_key, ca=False, usage=ExtendedKeyUsageOID.CLIENT_AUTH),
    }
    for name, data in files.items():
        fd = os.open(tmp / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    try:
        os.rename(tmp, root)
    except OSError:  # made meanwhile by the other side: theirs stands
        shutil.rmtree(tmp, ignore_errors=True)
    return pki


def _san(value: str) -> x509.GeneralName:
    with contextlib.suppress(ValueError):
        return x509.IPAddress(ipaddress.ip_address(value))
    return x509.DNSName(value)


def serving_cert(pki: Pki, tls_sans: list[str]) -> tuple[bytes, bytes]:
    """(certificate chain PEM, key PEM) for the API server, valid for ALWAYS_SANS and `tls_sans`."""
    ca_key = serialization.load_pem_private_key(pki.read("server-ca.key"), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    ca = x509.load_pem_x509_certificate(pki.read("server-ca.crt"))
    key = _key()
    names = list(dict.fromkeys([*ALWAYS_SANS, *tls_sans]))
    cert = _cert(_name("k3s", "k3s"), key, ca.subject, ca_key, ca=False,
                 usage=ExtendedKeyUsageOID.SERVER_AUTH, sans=[_san(n) for n in names])
    return cert, _pem_key(key)


if __name__ == "__main__":  # the simulated k3s on a host whose image did not bring its PKI
    import sys

    ensure(Path(sys.argv[1]))
