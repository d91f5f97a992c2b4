"""The simulated Nebius, asked through the official SDK unchanged: its IAM refuses a JWT signed by
another key, an expired one and one for another audience (UNAUTHENTICATED, with the reason), the
adapter reports that as AuthError, and a Create retried under its idempotency key makes one instance."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from fakeclouds import connect, nebius_api, nebius_auth
from fakeclouds.server import FakeCloudServer
from providers.base import AuthError
from providers.nebius import NebiusProvider


def _jwt(token: str, key: Any, **claims: Any) -> str:
    now = datetime.now(UTC)
    account = nebius_auth.service_account_id(token)
    body = {
        "iss": account,
        "sub": account,
        "aud": nebius_auth.AUDIENCE,
        "iat": now,
        "exp": now + timedelta(minutes=1),
        **claims,
    }
    return jwt.encode(body, key, algorithm="RS256", headers={"kid": nebius_auth.public_key_id(token)})


def _exchange_with(server: FakeCloudServer, subject: str) -> Any:
    """The SDK's own exchange path, its JWT replaced: a TokenRequester handing `subject` over."""
    from nebius.api.nebius.iam import v1 as iam
    from nebius.base.resolver import Constant
    from nebius.base.service_account.service_account import TokenRequester
    from nebius.sdk import SDK

    class Fixed(TokenRequester):
        def get_exchange_token_request(self) -> Any:
            return iam.ExchangeTokenRequest(
                grant_type=nebius_auth.GRANT_TYPE,
                subject_token=subject,
                subject_token_type=nebius_auth.SUBJECT_TOKEN_TYPE,
                requested_token_type="urn:ietf:params:oauth:token-type:access_token",
            )

    return SDK(
        credentials=Fixed(),
        resolver=Constant(str(server.grpc_tls_target)),
        tls_credentials=grpc.ssl_channel_credentials(root_certificates=str(server.ca_pem).encode()),
        user_agent_prefix="gpuprov-test",
    )


@pytest.mark.parametrize("case", ["other-key", "expired", "wrong-audience"])
async def test_iam_refuses_bad_jwts(server: FakeCloudServer, case: str) -> None:
    from nebius.aio.service_error import RequestError

    token = server.tokens["nebius"]
    own = nebius_auth.private_key(token)
    subject = {
        "other-key": lambda: _jwt(token, rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        "expired": lambda: _jwt(
            token,
            own,
            iat=datetime.now(UTC) - timedelta(minutes=10),
            exp=datetime.now(UTC) - timedelta(minutes=5),
        ),
        "wrong-audience": lambda: _jwt(token, own, aud="someone-else.example"),
    }[case]()
    reason = {"other-key": "signature", "expired": "expired", "wrong-audience": "audience"}[case]
    sdk = _exchange_with(server, subject)
    try:
        with pytest.raises(RequestError) as caught:
            await sdk.whoami(
                auth_options={"token_renew_report_error": "1", "token_renew_synchronous": "1"},
                timeout=10,
                retries=0,
            )
        assert caught.value.status.code.name == "UNAUTHENTICATED"
        assert reason in str(caught.value.status.message)
    finally:
        await sdk.close()


async def test_a_good_jwt_is_exchanged(server: FakeCloudServer) -> None:
    token = server.tokens["nebius"]
    sdk = _exchange_with(server, _jwt(token, nebius_auth.private_key(token)))
    try:
        profile = await sdk.whoami(timeout=10, retries=0)
        assert profile.service_account_profile.info.metadata.id == nebius_auth.service_account_id(token)
    finally:
        await sdk.close()


async def test_adapter_refuses_a_key_the_account_does_not_have(server: FakeCloudServer) -> None:
    creds = dict(nebius_api.FACADE.credentials(server.tokens["nebius"]))
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    creds["private_key"] = other.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    async with NebiusProvider(
        NebiusProvider.parse_credentials(creds),
        installation_id="abcd1234",
        options=connect.options(server, "nebius"),
    ) as p:
        with pytest.raises(AuthError) as caught:
            await p.verify()
    assert "signature" in caught.value.message
    assert "PRIVATE KEY" not in caught.value.message


def test_credentials_refuse_what_is_not_a_pem_key() -> None:
    from providers.base import InvalidRequest

    with pytest.raises(InvalidRequest) as caught:
        NebiusProvider.parse_credentials(
            {"service_account_id": "sa", "public_key_id": "pk", "private_key": "not a key"}
        )
    assert "private_key" in caught.value.message and "not a key" not in caught.value.message


@pytest.mark.parametrize("value", ["Bearer v1.acct.99999999999.é", "Bearer v1.acct.²³.abc"],
                         ids=["non-ascii-signature", "non-ascii-digits"])
def test_a_malformed_bearer_is_refused_not_a_crash(value: str) -> None:
    """What the SDK never sends, but a client might: refused as unauthenticated (401), not a 500."""
    iam = nebius_auth.Iam("t0k3n")
    value = value.replace("v1", nebius_auth._PREFIX)
    with pytest.raises(nebius_auth.Unauthorized):
        iam.check_bearer(value)
