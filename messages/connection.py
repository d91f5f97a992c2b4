"""Connecting and disconnecting a cloud account.

Credentials travel only sealed (Fernet ciphertext from the API's secret box): the workflow
history holds no secret in clear, and only activities, which hold the key, open them.
"""

from __future__ import annotations

from pydantic import BaseModel

from messages.allocation import Timing
from providers.base import ConnectionOptions


class ConnectRequest(BaseModel):
    connection_id: str  # chosen by the API before the workflow starts
    provider: str
    name: str
    project: str = "default"  # the project the connection will belong to
    sealed_credentials: str  # Fernet token of the credentials dict
    options: ConnectionOptions = ConnectionOptions()
    account: str | None = None  # set by the workflow from verify's answer before saving


class ConnectResult(BaseModel):
    """What ConnectWorkflow returns. ok=False: nothing was stored."""

    connection_id: str
    ok: bool
    account: str | None = None
    reason: str | None = None


class DisconnectRequest(BaseModel):
    connection_id: str
    timing: Timing = Timing()


class DisconnectResult(BaseModel):
    connection_id: str
    terminated: list[str]  # allocation ids whose machines were torn down first
