"""AWS Signature Version 4, checked the way AWS checks it: the simulated AWS recomputes the
signature of each request with the secret it issued and compares (botocore's own signer does the
arithmetic, so a request boto3 signed correctly always passes and any other secret fails).
"""

from __future__ import annotations

import datetime as dt
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass

_AUTH = re.compile(r"^AWS4-HMAC-SHA256\s+Credential=([^/,\s]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request,\s*"
                   r"SignedHeaders=([a-z0-9;_.-]+),\s*Signature=([0-9a-f]{64})\s*$")
MAX_SKEW = dt.timedelta(minutes=15)  # AWS refuses requests signed more than 15 minutes off


@dataclass(frozen=True)
class Scope:
    access_key_id: str
    region: str
    service: str


class SignatureError(Exception):
    """Why a request's signature is refused. `code` is the AWS error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def scope_of(headers: Mapping[str, str]) -> Scope | None:
    """The credential scope of a SigV4 Authorization header (None when absent or malformed)."""
    m = _AUTH.match(headers.get("authorization", ""))
    return Scope(access_key_id=m.group(1), region=m.group(3), service=m.group(4)) if m else None


def verify(*, method: str, url: str, headers: Mapping[str, str], body: bytes, access_key_id: str,
           secret: str, now: dt.datetime | None = None) -> Scope:
    """The request's scope if it is signed by (access_key_id, secret); SignatureError otherwise.
    `headers` must have lowercase names; `url` is the URL the client signed (scheme, host, path, query)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    m = _AUTH.match(headers.get("authorization", ""))
    if m is None:
        raise SignatureError("MissingAuthenticationToken", "Request is missing Authentication Token")
    key, day, region, service, signed, signature = m.groups()
    if key != access_key_id:
        raise SignatureError("InvalidClientTokenId", "The security token included in the request is invalid.")
    stamp = headers.get("x-amz-date", "")
    try:
        when = dt.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        raise SignatureError("IncompleteSignature", "X-Amz-Date is missing or malformed") from None
    if stamp[:8] != day:
        raise SignatureError("SignatureDoesNotMatch", "Credential date does not match X-Amz-Date")
    if abs((now or dt.datetime.now(dt.UTC)) - when) > MAX_SKEW:
        raise SignatureError("RequestExpired", "Request has expired (signed more than 15 minutes away)")
    names = signed.split(";")
    if "host" not in names:
        raise SignatureError("SignatureDoesNotMatch", "The host header must be signed")
    request = AWSRequest(method=method, url=url, data=body,
                         headers={n: headers[n] for n in names if n in headers})
    request.context["timestamp"] = stamp
    signer = SigV4Auth(Credentials(access_key_id, secret), service, region)
    expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    if not hmac.compare_digest(expected, signature):
        raise SignatureError("SignatureDoesNotMatch",
                             "The request signature we calculated does not match the signature you provided. "
                             "Check your AWS Secret Access Key and signing method.")
    return Scope(access_key_id=key, region=region, service=service)
