"""The simulated OCI identity: the tenancy, its one user, the user's API signing key, and the check of
every request's draft-cavage HTTP signature against that key.

Real OCI (docs.oracle.com/en-us/iaas/Content/API/Concepts/signingrequests.htm; the SDK's
oci/signer.py): `authorization: Signature version="1",keyId="<tenancy>/<user>/<fingerprint>",
algorithm="rsa-sha256",headers="date (request-target) host",signature="<base64>"`; PUT, POST and PATCH
also sign `content-length content-type x-content-sha256` (the body's SHA-256, base64). A request whose
`date` is more than 5 minutes off, whose key is not registered, or whose signature does not verify is
401 `NotAuthenticated`.

The key pair is derived from the facade's token (gcp_auth's seeded RSA under an OCI salt), so the server
and `Facade.credentials(token)` agree without sharing a file; a wrong token is a wrong key.
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import hashlib
import re
import time
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from fakeclouds import gcp_auth
from fakeclouds.errors import Unauthorized

HOME_REGION = "us-ashburn-1"
MAX_SKEW_S = 300  # "the date ... must be within 5 minutes of the server's clock"
GENERIC = ("date", "(request-target)", "host")
BODY = ("content-length", "content-type", "x-content-sha256")
_PARAM = re.compile(r'(\w+)="([^"]*)"')


def _digest(tag: str, token: str) -> str:
    return hashlib.sha256(f"oci-sim:{tag}\0{token}".encode()).hexdigest()[:40]


def private_key(token: str) -> rsa.RSAPrivateKey:
    return gcp_auth.private_key(f"oci:{token}")


def tenancy_ocid(token: str) -> str:
    return f"ocid1.tenancy.oc1..aaaaaaaa{_digest('tenancy', token)}"


def user_ocid(token: str) -> str:
    return f"ocid1.user.oc1..aaaaaaaa{_digest('user', token)}"


def fingerprint_of(key: rsa.RSAPublicKey) -> str:
    """OCI's key fingerprint: MD5 of the DER SubjectPublicKeyInfo, colon-separated hex."""
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    digest = hashlib.md5(der, usedforsecurity=False).hexdigest()
    return ":".join(digest[i : i + 2] for i in range(0, 32, 2))


def private_key_pem(token: str) -> str:
    return gcp_auth.pkcs8_pem(private_key(token))


def credentials(token: str) -> dict[str, Any]:
    """The connect form's five fields for the simulation's token (what `make run` connects with)."""
    return {
        "user_ocid": user_ocid(token),
        "tenancy_ocid": tenancy_ocid(token),
        "fingerprint": fingerprint_of(private_key(token).public_key()),
        "region": HOME_REGION,
        "private_key": private_key_pem(token),
    }


class Signatures:
    """The one registered API key of the simulated tenancy, and the check of a signed request."""

    def __init__(self, token: str) -> None:
        key = private_key(token)
        self.public_key = key.public_key()
        self.tenancy, self.user = tenancy_ocid(token), user_ocid(token)
        self.key_id = f"{self.tenancy}/{self.user}/{fingerprint_of(self.public_key)}"

    def check(
        self, method: str, target: str, headers: dict[str, str], body: bytes, now: float | None = None
    ) -> str:
        """The tenancy a signed request stands for; Unauthorized (the reason) otherwise. `target` is the
        path with its query, as sent; `headers` lower-cased."""
        scheme, _, rest = (headers.get("authorization") or "").partition(" ")
        if scheme != "Signature":
            raise Unauthorized("The required information to complete authentication was not provided.")
        params = dict(_PARAM.findall(rest))
        if params.get("keyId") != self.key_id:
            raise Unauthorized(
                "The required information to complete authentication was not provided or was incorrect."
            )  # an unknown key, user or fingerprint
        if params.get("algorithm") != "rsa-sha256" or params.get("version", "1") != "1":
            raise Unauthorized("Unsupported signature algorithm or version.")
        signed = params.get("headers", "date").lower().split()
        needed = GENERIC + (BODY if method.upper() in ("POST", "PUT", "PATCH") else ())
        if missing := [h for h in needed if h not in signed]:
            raise Unauthorized(f"The signature does not cover the required header(s): {', '.join(missing)}.")
        date = headers.get("date") or headers.get("x-date")
        try:
            when = email.utils.parsedate_to_datetime(date or "").timestamp()
        except (TypeError, ValueError):
            raise Unauthorized("The date header is missing or malformed.") from None
        if abs((time.time() if now is None else now) - when) > MAX_SKEW_S:
            raise Unauthorized("Date " + str(date) + " is not within 5 minutes of the server's clock.")
        if "x-content-sha256" in signed:
            if headers.get("x-content-sha256") != base64.b64encode(hashlib.sha256(body).digest()).decode():
                raise Unauthorized("The x-content-sha256 header does not match the request body.")
            if headers.get("content-length", "0") != str(len(body)):
                raise Unauthorized("The content-length header does not match the request body.")
        lines = []
        for h in signed:
            if h == "(request-target)":
                lines.append(f"(request-target): {method.lower()} {target}")
            elif h in headers:
                lines.append(f"{h}: {headers[h]}")
            else:
                raise Unauthorized(f"The signed header {h!r} is missing from the request.")
        try:
            signature = base64.b64decode(params.get("signature", ""), validate=True)
            self.public_key.verify(signature, "\n".join(lines).encode(), padding.PKCS1v15(), hashes.SHA256())
        except (InvalidSignature, binascii.Error, ValueError):
            raise Unauthorized("The request signature does not verify with the registered API key.") from None
        return self.tenancy
