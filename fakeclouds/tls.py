"""TLS for simulated clouds whose SDK talks only https (Azure: the SDK refuses a bearer token over
plain http, and that check stays on). A private CA signs one server certificate for the loopback
host; both are generated once into `<dir>/tls/` and reused, so a client that trusts the CA (the
connection's `ca_bundle`) keeps trusting the server across restarts of a persisted simulation.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

CA_FILE, CERT_FILE, KEY_FILE = "ca.pem", "server.pem", "server-key.pem"
VALID_DAYS = 3650  # a simulation's certificate should not expire under a long-lived `make run` home


@dataclass(frozen=True)
class TlsFiles:
    ca_file: Path  # the CA certificate (PEM): what clients trust
    cert_file: Path  # the server certificate (PEM)
    key_file: Path  # its private key (PEM, mode 0600)

    @property
    def ca_pem(self) -> str:
        return self.ca_file.read_text()


def ensure(directory: str | Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> TlsFiles:
    """The CA and server certificate in `directory`/tls, made on first use. A server certificate that
    does not name every one of `hosts` is made anew by the same CA, for those hosts and the ones it
    named (so two callers with different hosts do not take turns replacing it)."""
    root = Path(directory) / "tls"
    files = TlsFiles(root / CA_FILE, root / CERT_FILE, root / KEY_FILE)
    named = _names(files.cert_file) if files.cert_file.exists() else set()
    if files.ca_file.exists() and files.key_file.exists() and named >= set(hosts):
        return files
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    _generate(root, files, tuple(dict.fromkeys([*hosts, *sorted(named)])))
    return files


def _names(cert_file: Path) -> set[str]:
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return set()
    return {str(n) for n in san.get_values_for_type(x509.IPAddress)} | set(
        san.get_values_for_type(x509.DNSName)
    )


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    tmp.replace(path)


def _generate(root: Path, files: TlsFiles, hosts: tuple[str, ...]) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key_file = root / "ca-key.pem"
    if files.ca_file.exists() and ca_key_file.exists():  # keep the CA clients already trust
        ca_cert = x509.load_pem_x509_certificate(files.ca_file.read_bytes())
        loaded = serialization.load_pem_private_key(ca_key_file.read_bytes(), password=None)
        assert isinstance(loaded, ec.EllipticCurvePrivateKey)
        ca_key = loaded
    else:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpuprov simulated clouds CA")])
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        _write(
            ca_key_file,
            ca_key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
        )
        _write(files.ca_file, ca_cert.public_bytes(serialization.Encoding.PEM))
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write(
        files.key_file,
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )
    _write(files.cert_file, cert.public_bytes(serialization.Encoding.PEM))
