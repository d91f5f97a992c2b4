"""Modal: an account-wide token."""

from __future__ import annotations

from providers.permissions.base import UNCONFIRMED, UNSCOPED, unscoped

ENTRY = unscoped(
    tuple(f"modal.client.ModalClient/{m}" for m in (
        "ClientHello", "AuthTokenGet", "EnvironmentGetOrCreate", "AppGetOrCreate", "ImageGetOrCreate",
        "SandboxCreate", "SandboxGetTaskId", "SandboxGetTunnels", "SandboxListV2", "SandboxTagsGet",
        "SandboxTerminate", "SandboxWait", "SandboxWaitV2")),
    f"{UNSCOPED}: a token has its workspace member's permissions (a service user's too); use a workspace "
    "(or environment) kept for gpuprov",
    ("https://modal.com/docs/guide/service-users (\"Service users have the same permissions as workspace "
     "members\")",),
    ("Environment-scoped service users (viewer / contributor) may exist " + UNCONFIRMED + ".",))
