"""The simulated Nebius IAM: the service account's authorized key it issues, the JWT exchange, and
the bearer tokens every other call carries.

Real Nebius: the SDK signs an RS256 JWT (`kid` = the public key id, `iss` = `sub` = the service
account id, `aud` = `token-service.iam.new.nebiuscloud.net`, one minute of life) and exchanges it at
`nebius.iam.v1.TokenExchangeService/Exchange` for an IAM token, which it then sends as
`authorization: Bearer ...` on every call. Here the exchange checks the JWT against the public key
registered for the key id (signature, issuer and subject, audience, expiry) and answers an access
token that is self-validating (an HMAC over the account and expiry with the facade's secret), so a
restarted simulation still honours the tokens it issued.

The key pair is derived from the facade's token (fakeclouds/gcp_auth.py's seeded RSA generation,
under a Nebius salt), so the server and `Facade.credentials(token)` agree without sharing a file.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from fakeclouds import gcp_auth
from fakeclouds.errors import Unauthorized

AUDIENCE = "token-service.iam.new.nebiuscloud.net"  # what nebius.base.service_account signs for
TOKEN_LIFETIME_S = 12 * 3600  # IAM tokens live hours; the SDK renews before expiry
JWT_MAX_LIFETIME_S = 3600
GRANT_TYPE = "urn:ietf:params:oauth:grant-type:token-exchange"
SUBJECT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"  # noqa: S105 — a type URN, not a secret
_PREFIX = "nsim1"


def _digest(tag: str, token: str, n: int = 20) -> str:
    return hashlib.sha256(f"nebius-sim:{tag}\0{token}".encode()).hexdigest()[:n]


def private_key(token: str) -> rsa.RSAPrivateKey:
    return gcp_auth.private_key(f"nebius:{token}")


def service_account_id(token: str) -> str:
    return f"serviceaccount-e00{_digest('sa', token)}"


def public_key_id(token: str) -> str:
    return f"publickey-e00{_digest('kid', token)}"


def private_key_pem(token: str) -> str:
    return gcp_auth.pkcs8_pem(private_key(token))


def credentials(token: str) -> dict[str, Any]:
    """The connect form's three fields for the simulation's token (what `make run` connects with)."""
    return {
        "service_account_id": service_account_id(token),
        "public_key_id": public_key_id(token),
        "private_key": private_key_pem(token),
    }


@dataclass(frozen=True)
class Iam:
    """The one service account of the simulated tenant, and its one registered public key."""

    token: str  # the facade's secret: derives the key pair and signs access tokens

    @property
    def account(self) -> str:
        return service_account_id(self.token)

    def exchange(
        self, subject_token: str, *, grant_type: str, subject_token_type: str, now: float | None = None
    ) -> tuple[str, int]:
        """(access token, lifetime in s) for a valid JWT; Unauthorized with the reason otherwise."""
        if grant_type != GRANT_TYPE or subject_token_type != SUBJECT_TOKEN_TYPE:
            raise Unauthorized("unsupported grant_type or subject_token_type")
        try:
            header = jwt.get_unverified_header(subject_token)
        except jwt.PyJWTError:
            raise Unauthorized("subject_token is not a JWT") from None
        if header.get("alg") != "RS256":
            raise Unauthorized("subject_token must be signed with RS256")
        if header.get("kid") != public_key_id(self.token):
            raise Unauthorized(f"public key {header.get('kid')!r} not found")
        try:
            claims = jwt.decode(
                subject_token,
                private_key(self.token).public_key(),
                algorithms=["RS256"],
                audience=AUDIENCE,
                options={"require": ["exp", "iss", "sub", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthorized("subject_token has expired") from None
        except jwt.InvalidAudienceError:
            raise Unauthorized(f"subject_token audience must be {AUDIENCE}") from None
        except jwt.InvalidSignatureError:
            raise Unauthorized("subject_token signature does not match the public key") from None
        except jwt.PyJWTError as exc:
            raise Unauthorized(f"subject_token is invalid: {type(exc).__name__}") from None
        if claims.get("iss") != self.account or claims.get("sub") != self.account:
            raise Unauthorized("subject_token iss/sub is not the key's service account")
        now = time.time() if now is None else now
        if float(claims["exp"]) - float(claims.get("iat", now)) > JWT_MAX_LIFETIME_S:
            raise Unauthorized("subject_token lives longer than an hour")
        expires = int(now) + TOKEN_LIFETIME_S
        return self._sign(self.account, expires), TOKEN_LIFETIME_S

    def _sign(self, account: str, expires: int) -> str:
        body = f"{_PREFIX}.{account}.{expires}"
        mac = hmac.new(self.token.encode(), body.encode(), hashlib.sha256).hexdigest()[:32]
        return f"{body}.{mac}"

    def check_bearer(self, authorization: str | None, now: float | None = None) -> str:
        """The account an `authorization: Bearer` value stands for; Unauthorized otherwise."""
        scheme, _, value = (authorization or "").partition(" ")
        parts = value.strip().split(".")
        # ASCII digits only ("²".isdigit() holds, int() refuses it), bytes compared (compare_digest
        # raises on non-ASCII str): any malformed token is a 401, never a 500.
        if scheme.lower() != "bearer" or len(parts) != 4 or parts[0] != _PREFIX \
                or not (parts[2].isascii() and parts[2].isdigit()):
            raise Unauthorized("missing or invalid IAM token")
        account, expires = parts[1], int(parts[2])
        if not hmac.compare_digest(self._sign(account, expires).encode(), value.strip().encode()):
            raise Unauthorized("missing or invalid IAM token")
        if expires < (time.time() if now is None else now):
            raise Unauthorized("IAM token has expired")
        return account
