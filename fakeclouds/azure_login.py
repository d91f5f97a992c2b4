"""Microsoft Entra ID, simulated, for the Azure facade (`azure_api.py`): the OpenID configuration and
the client-credentials token endpoint under `/azure/login/{tenant}/...` as azure-identity calls them,
refusing with Entra's AADSTS errors (unknown tenant, grant type, scope without `/.default`, unknown
client, wrong secret); and the access tokens it issues, HMAC-signed by the client secret (the
facade's token) so they survive a server restart, which ARM checks on every call (`check_token`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from fakeclouds.azure_arm import CLIENT_ID, TENANT, ArmError
from fakeclouds.bodies import form_fields

TOKEN_TTL = 3600


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def issue_token(secret: str, client_id: str, now: float | None = None) -> str:
    claims = {
        "tid": TENANT,
        "appid": client_id,
        "exp": int((now or time.time()) + TOKEN_TTL),
        "aud": "https://management.azure.com/",
        "jti": uuid.uuid4().hex,
    }
    payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
    sig = _b64(hmac.new(secret.encode(), payload.encode(), hashlib.sha256).digest())
    return f"{payload}.{sig}"


def check_token(header: str, secret: str) -> None:
    scheme, _, value = header.partition(" ")
    payload, _, sig = value.strip().partition(".")
    expected = _b64(hmac.new(secret.encode(), payload.encode(), hashlib.sha256).digest())
    if scheme.lower() != "bearer" or not payload or not hmac.compare_digest(sig, expected):
        raise ArmError(401, "InvalidAuthenticationToken", "The access token is invalid.")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    if claims.get("exp", 0) < time.time():
        raise ArmError(
            401,
            "ExpiredAuthenticationToken",
            "The access token expiry UTC time is earlier than current UTC time.",
        )


def _login_error(status: int, error: str, description: str) -> JSONResponse:
    return JSONResponse(
        {
            "error": error,
            "error_description": description,
            "error_codes": [],
            "timestamp": time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime()),
            "trace_id": str(uuid.uuid4()),
            "correlation_id": str(uuid.uuid4()),
        },
        status_code=status,
    )


def add_login_routes(router: APIRouter, token: str) -> None:
    """Entra's two endpoints the SDK calls, on the facade's router; `token` is the client secret."""

    @router.get("/login/{tenant}/v2.0/.well-known/openid-configuration")
    async def openid_configuration(request: Request, tenant: str) -> Response:
        if tenant.lower() not in (TENANT, "organizations", "common"):
            return _login_error(
                400,
                "invalid_tenant",
                f"AADSTS90002: Tenant '{tenant}' not found. Check to make sure you have the "
                "correct tenant ID and are signing into the correct cloud.",
            )
        base = str(request.url).split("/v2.0/.well-known", 1)[0]
        return JSONResponse(
            {
                "issuer": f"{base}/v2.0",
                "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
                "token_endpoint": f"{base}/oauth2/v2.0/token",
                "device_authorization_endpoint": f"{base}/oauth2/v2.0/devicecode",
                "jwks_uri": f"{base}/discovery/v2.0/keys",
                "response_types_supported": ["code", "id_token", "code id_token", "id_token token"],
                "token_endpoint_auth_methods_supported": [
                    "client_secret_post",
                    "private_key_jwt",
                    "client_secret_basic",
                ],
                "tenant_region_scope": "NA",
            }
        )

    @router.post("/login/{tenant}/oauth2/v2.0/token")
    async def token_endpoint(request: Request, tenant: str) -> Response:
        form = await form_fields(request)
        if tenant.lower() != TENANT:
            return _login_error(400, "invalid_request", f"AADSTS90002: Tenant '{tenant}' not found.")
        if form.get("grant_type") != "client_credentials":
            return _login_error(
                400, "unsupported_grant_type", "AADSTS70003: The app requested an unsupported grant type."
            )
        if not str(form.get("scope", "")).endswith("/.default"):
            return _login_error(
                400,
                "invalid_scope",
                "AADSTS1002012: The provided value for scope is not valid. "
                "Client credential flows must have a scope value with /.default suffixed.",
            )
        if form.get("client_id") != CLIENT_ID:
            return _login_error(
                400,
                "unauthorized_client",
                f"AADSTS700016: Application with identifier '{form.get('client_id')}' was not "
                f"found in the directory '{TENANT}'.",
            )
        secret = form.get("client_secret", "")
        if not hmac.compare_digest(secret.encode(), token.encode()):
            return _login_error(
                401,
                "invalid_client",
                "AADSTS7000215: Invalid client secret provided. Ensure the secret being sent in "
                "the request is the client secret value, not the client secret ID, for a "
                f"secret added to app '{CLIENT_ID}'.",
            )
        return JSONResponse(
            {
                "token_type": "Bearer",
                "expires_in": TOKEN_TTL,
                "ext_expires_in": TOKEN_TTL,
                "access_token": issue_token(token, CLIENT_ID),
            }
        )
