"""The simulated Compute Engine's service account: the key it issues and the JWTs it accepts.

With service-account credentials, google-cloud-compute signs its own JWT (self-signed JWT access,
google.aip.dev/auth/4111) and never calls the key's `token_uri`, so the simulation verifies that JWT
itself, on every request: RS256 signature against the public half of the key it issued, `kid`,
issuer, audience (or scope), and expiry.

The key pair is derived from the facade's token (a seeded RSA key generation), so the server and
`Facade.credentials(token)` — called in another process by `make run` and the tests — agree on it
without sharing a file, and credentials made from any other token are refused (401).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

PROJECT = "gpuprov-sim"
CLIENT_EMAIL = f"gpuprov@{PROJECT}.iam.gserviceaccount.com"
# What a self-signed JWT for Compute Engine carries: the audience google-auth sets from the client's
# default host, or (credentials with scopes) a scope claim instead of an audience.
AUDIENCE = "https://compute.googleapis.com/"
SCOPES = {"https://www.googleapis.com/auth/compute", "https://www.googleapis.com/auth/cloud-platform"}
MAX_LIFETIME_S = 3600  # google-auth issues 1-hour JWTs; Google refuses longer ones
SKEW_S = 60
_E = 65537
_SMALL_PRIMES = [p for p in range(3, 2000) if all(p % d for d in range(2, int(p**0.5) + 1))]
_SIEVE = math.prod(_SMALL_PRIMES)


class AuthFailure(Exception):
    """Why a request's credentials are refused (for the log; the answer is Google's fixed 401)."""


def _stream(seed: bytes) -> Iterator[int]:
    """Deterministic 256-bit blocks (SHA-256 in counter mode): the key generation's randomness."""
    counter = 0
    while True:
        yield int.from_bytes(hashlib.sha256(seed + counter.to_bytes(8, "big")).digest(), "big")
        counter += 1


def _probably_prime(n: int, bases: Iterator[int], rounds: int = 40) -> bool:
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for _ in range(rounds):
        a = 2 + next(bases) % (n - 3)
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = pow(x, 2, n)
            if x == n - 1:
                break
        else:
            return False
    return True


def _prime(bits: int, rand: Iterator[int]) -> int:
    while True:
        n = 0
        for _ in range(bits // 256):
            n = (n << 256) | next(rand)
        n |= (3 << (bits - 2)) | 1  # top two bits set: p*q has exactly 2*bits bits
        if math.gcd(n, _SIEVE) == 1 and (n - 1) % _E != 0 and _probably_prime(n, rand):
            return n


def _derive_primes(token: str) -> tuple[int, int]:
    rand = _stream(b"gpuprov-sim-gcp-key\0" + token.encode())
    p = _prime(1024, rand)
    q = _prime(1024, rand)
    while q == p:
        q = _prime(1024, rand)
    return p, q


def _cache_file(token: str) -> Path:
    """Where this machine keeps the primes derived for `token`: deriving them in pure Python costs
    about a second of CPU, paid by every process that starts the simulation (`make run`, the
    process tests) — the cache pays it once per machine. Only ever a cache: what it holds is
    checked against the derivation's own fingerprint, and anything else is derived again."""
    root = Path(os.environ.get("GPUPROV_SIM_CACHE") or Path(tempfile.gettempdir()) / "gpuprov-sim-cache")
    return root / f"gcp-{hashlib.sha256(b'gcp-primes' + token.encode()).hexdigest()[:32]}.json"


def _primes(token: str) -> tuple[int, int]:
    path = _cache_file(token)
    tag = hashlib.sha256(b"gcp-primes-check" + token.encode()).hexdigest()
    try:
        saved = json.loads(path.read_text())
        p, q = int(saved["p"]), int(saved["q"])
        check = hashlib.sha256(f"{tag}:{p}:{q}".encode()).hexdigest()
        if saved.get("check") == check and p != q and p.bit_length() == q.bit_length() == 1024:
            return p, q
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no cache yet, or not one we wrote: derive
    p, q = _derive_primes(token)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"p": str(p), "q": str(q),
                                   "check": hashlib.sha256(f"{tag}:{p}:{q}".encode()).hexdigest()}))
        tmp.chmod(0o600)
        tmp.replace(path)  # atomic: a concurrent reader sees the old file or the whole new one
    except OSError:
        pass  # a read-only or full disk: the next process derives them again
    return p, q


@functools.lru_cache(maxsize=16)
def private_key(token: str) -> rsa.RSAPrivateKey:
    """The 2048-bit RSA key the simulation issues for `token` (the same one every time)."""
    p, q = _primes(token)
    d = pow(_E, -1, (p - 1) * (q - 1))
    numbers = rsa.RSAPrivateNumbers(
        p=p,
        q=q,
        d=d,
        dmp1=rsa.rsa_crt_dmp1(d, p),
        dmq1=rsa.rsa_crt_dmq1(d, q),
        iqmp=rsa.rsa_crt_iqmp(p, q),
        public_numbers=rsa.RSAPublicNumbers(_E, p * q),
    )
    return numbers.private_key()


def pkcs8_pem(key: rsa.RSAPrivateKey) -> str:
    """`key` as an unencrypted PKCS#8 PEM: how the clouds hand out a private key (GCP, Nebius, OCI)."""
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def key_id(token: str) -> str:
    return hashlib.sha256(b"kid\0" + token.encode()).hexdigest()[:40]


def service_account_key(token: str) -> dict[str, str]:
    """The service-account key JSON (as a dict) the simulation issues for `token`: what a user
    downloads from the Cloud console. The private half is only here; the server keeps the public."""
    pem = pkcs8_pem(private_key(token))
    return {
        "type": "service_account",
        "project_id": PROJECT,
        "private_key_id": key_id(token),
        "private_key": pem,
        "client_email": CLIENT_EMAIL,
        "client_id": str(int(key_id(token)[:15], 16)),
        # Never called: the SDK signs its own JWT (see the module docstring). Real keys say the same.
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": "https://oauth2.googleapis.com/token",
        "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
        "universe_domain": "googleapis.com",
    }


def _b64json(part: str) -> dict[str, Any]:
    raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise AuthFailure("JWT part is not a JSON object")
    return value


@dataclass(frozen=True)
class Verifier:
    """Checks the bearer JWTs of requests to one simulated project."""

    kid: str
    public_key: rsa.RSAPublicKey
    client_email: str = CLIENT_EMAIL

    @classmethod
    def for_token(cls, token: str) -> Verifier:
        return cls(kid=key_id(token), public_key=private_key(token).public_key())

    def check(self, authorization: str | None, now: float | None = None) -> dict[str, Any]:
        """The JWT's claims; AuthFailure when it is missing, forged, expired or not for Compute."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or token.count(".") != 2:
            raise AuthFailure("no bearer JWT")
        head_b64, body_b64, sig_b64 = token.split(".")
        try:
            header, claims = _b64json(head_b64), _b64json(body_b64)
            signature = base64.urlsafe_b64decode(sig_b64 + "=" * (-len(sig_b64) % 4))
        except (ValueError, UnicodeDecodeError) as exc:
            raise AuthFailure(f"malformed JWT ({type(exc).__name__})") from None
        if header.get("alg") != "RS256" or header.get("kid") != self.kid:
            raise AuthFailure("unknown signing key")
        try:
            self.public_key.verify(
                signature, f"{head_b64}.{body_b64}".encode(), padding.PKCS1v15(), hashes.SHA256()
            )
        except InvalidSignature:
            raise AuthFailure("bad signature") from None
        if (
            claims.get("iss") != self.client_email
            or claims.get("sub", self.client_email) != self.client_email
        ):
            raise AuthFailure("issuer is not this service account")
        scopes = set(str(claims.get("scope") or "").split())
        if claims.get("aud") != AUDIENCE and not (claims.get("aud") is None and scopes & SCOPES):
            raise AuthFailure("JWT is not for compute.googleapis.com")
        now = time.time() if now is None else now
        try:
            iat, exp = float(claims["iat"]), float(claims["exp"])
        except (KeyError, TypeError, ValueError):
            raise AuthFailure("JWT without iat/exp") from None
        if exp <= now or iat > now + SKEW_S or exp - iat > MAX_LIFETIME_S:
            raise AuthFailure("JWT expired or not yet valid")
        return claims
