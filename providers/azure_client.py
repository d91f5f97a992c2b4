"""The Azure SDKs behind the Azure adapter (providers/azure.py): azure-identity and
azure-mgmt-compute/-network/-resource, blocking, imported on first use and built once per adapter
(on a pool thread); where ARM and the Entra authority are for a connection's endpoint; the SDK's
retries off and its long-running-operation polling with our backoff; ARM's error codes as the
taxonomy reads them; the reads, waits and deletes every primitive shares.

`ArmClient` is the adapter's base (`AzureProvider` adds the contract).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import Any, ClassVar

from providers.base import FailureScope, ProviderError, Transient
from providers.rest import ErrorKind
from providers.sdk import SdkCloudProvider, SdkError

DEFAULT_ARM_HOST = "management.azure.com"
# Azure's clouds: ARM host -> its Microsoft Entra authority (public, US Government, China).
AUTHORITIES = {
    "management.azure.com": "login.microsoftonline.com",
    "management.usgovcloudapi.net": "login.microsoftonline.us",
    "management.chinacloudapi.cn": "login.chinacloudapi.cn",
}
# The SDK's poller sleeps what Retry-After says; without one (or 0) ours backs off from the first
# delay to the last (the SDK's own default is a flat 30 s: a create would answer half a minute late).
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.1, 5.0

_CODES: dict[str, ErrorKind] = {
    "AllocationFailed": "capacity",
    "ZonalAllocationFailed": "capacity",
    "OverconstrainedAllocationRequest": "capacity",
    "OverconstrainedZonalAllocationRequest": "capacity",
    "SkuNotAvailable": "capacity",
    "OperationNotAllowed": "quota",  # refined in _map: only a quota message is quota
    "QuotaExceeded": "quota",
    "TooManyRequests": "rate_limit",
    "SubscriptionRequestsThrottled": "rate_limit",
    "InvalidAuthenticationToken": "auth",
    "ExpiredAuthenticationToken": "auth",
    "AuthenticationFailed": "auth",
    "AuthorizationFailed": "auth",
    "SubscriptionNotFound": "auth",
    "InvalidSubscriptionId": "auth",
    "InternalServerError": "transient",
    "InternalExecutionError": "transient",
    "ServiceUnavailable": "transient",
    "GatewayTimeout": "transient",
    "BadGateway": "transient",
    "RetryableError": "transient",
    "RetryableErrorDueToAnotherOperation": "transient",
    # Deletes racing the machine's own deletion: retrying after it is gone succeeds.
    "NicInUse": "transient",
    "PublicIPAddressCannotBeDeleted": "transient",
    "InUseNetworkSecurityGroupCannotBeDeleted": "transient",
    "Conflict": "transient",
    "ResourceGroupNotFound": "transient",  # deleted behind our back: prepare() makes it again
}



@functools.cache
def _backoff_polling() -> type:
    """ARMPolling that honours Retry-After and otherwise backs off 0.1, 0.2, 0.4 ... 5 s."""
    from azure.core.pipeline.policies._utils import get_retry_after
    from azure.mgmt.core.polling.arm_polling import ARMPolling

    class BackoffPolling(ARMPolling):  # type: ignore[misc]
        _next = BACKOFF_FIRST_S

        def _extract_delay(self) -> float:
            given = get_retry_after(self._pipeline_response)
            if given:
                return float(given)
            delay, self._next = self._next, min(self._next * 2, BACKOFF_MAX_S)
            return delay

    return BackoffPolling


def polling() -> Any:
    """A fresh poller strategy for one long-running operation."""
    return _backoff_polling()(BACKOFF_MAX_S)



class Clients:
    """The SDK clients of one connection (thread-safe; made once, on a pool thread)."""

    def __init__(self, credential: Any, compute: Any, network: Any, resource: Any) -> None:
        self.credential, self.compute, self.network, self.resource = credential, compute, network, resource



class ArmClient(SdkCloudProvider):
    """The SDK side of the Azure adapter: clients, error reading, ARM reads, waits and deletes."""

    error_codes: ClassVar[dict[str, ErrorKind]] = _CODES

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._clients: Clients | None = None

    @property
    def _creds(self) -> dict[str, Any]:
        return self.credentials.reveal()

    @property
    def _endpoint(self) -> str | None:
        return self.options.endpoint.rstrip("/") if self.options.endpoint else None

    def _arm_host(self) -> str:
        from urllib.parse import urlsplit

        return (urlsplit(self._endpoint).hostname or "").lower() if self._endpoint else DEFAULT_ARM_HOST

    def _arm_base(self) -> str:
        """The endpoint itself when it is one of Azure's ARM hosts, else `<endpoint>/arm` (a proxy or
        a simulation serving both halves under one base)."""
        if self._endpoint is None:
            return f"https://{DEFAULT_ARM_HOST}"
        return self._endpoint if self._arm_host() in AUTHORITIES else f"{self._endpoint}/arm"

    def _authority(self) -> dict[str, Any]:
        """azure-identity's authority for the endpoint: Azure's own for its ARM hosts, else
        `<endpoint>/login` without instance discovery (which only knows Microsoft's hosts)."""
        if self._arm_host() in AUTHORITIES:
            return {"authority": AUTHORITIES[self._arm_host()]}
        return {"authority": f"{self._endpoint}/login", "disable_instance_discovery": True}

    def _client_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"retry_total": 0, "connection_timeout": 10, "read_timeout": 60}
        ca_file = self.ca_bundle_file()
        if ca_file:
            kwargs["connection_verify"] = ca_file
        return kwargs

    def _sdk_clients(self) -> Clients:
        """Made on first use, on a pool thread (importing the SDKs takes a while)."""
        with self._lock:
            if self._clients is not None:
                return self._clients
            from azure.identity import ClientSecretCredential
            from azure.mgmt.compute import ComputeManagementClient
            from azure.mgmt.network import NetworkManagementClient
            from azure.mgmt.resource.resources import ResourceManagementClient

            creds = self._creds
            cred_kwargs: dict[str, Any] = {"retry_total": 0}
            client_kwargs = self._client_kwargs()
            if "connection_verify" in client_kwargs:  # the token endpoint trusts what ARM's clients do
                cred_kwargs["connection_verify"] = client_kwargs["connection_verify"]
            cred_kwargs.update(self._authority())
            client_kwargs["base_url"] = self._arm_base()
            if self._arm_host() in AUTHORITIES:
                client_kwargs["credential_scopes"] = [f"https://{self._arm_host()}/.default"]
            credential = ClientSecretCredential(
                creds["tenant_id"], creds["client_id"], creds["client_secret"], **cred_kwargs
            )
            sub = creds["subscription_id"]
            self._clients = Clients(
                credential,
                ComputeManagementClient(credential, sub, **client_kwargs),
                NetworkManagementClient(credential, sub, **client_kwargs),
                ResourceManagementClient(credential, sub, **client_kwargs),
            )
            return self._clients

    async def _c(self) -> Clients:
        return await self._sdk(self._sdk_clients)

    def sdk_error(self, exc: Exception) -> SdkError | None:
        from azure.core.exceptions import ClientAuthenticationError, HttpResponseError

        if isinstance(exc, ClientAuthenticationError) and exc.response is None:
            # azure-identity wraps everything that goes wrong getting a token in this one class: Entra's
            # refusals (their words carry an AADSTS code; an unknown tenant fails the discovery), but
            # also a refused connection or a 5xx — those are worth retrying, not an auth failure.
            text = str(exc.message or exc)
            if "AADSTS" in text or "Unable to get authority configuration" in text:
                return SdkError("AuthenticationFailed", text[:500], 401)
            return None
        if isinstance(exc, HttpResponseError) and exc.response is not None:
            error = getattr(exc, "error", None)
            code = str(getattr(error, "code", "") or "")
            message = str(getattr(error, "message", "") or exc.reason or "")
            return SdkError(
                code, message[:500], int(exc.status_code or 0),
                getattr(exc.response, "headers", {}).get("Retry-After"),
            )
        return None

    def _map(self, exc: Exception, scope: FailureScope | str | None) -> ProviderError:
        err = self.sdk_error(exc)
        if err is not None and err.code == "OperationNotAllowed" and "quota" not in err.message.lower():
            # "...not allowed since the VM is marked for deletion" and the like: a passing state
            return Transient(f"{self.id}: {err.code}: {err.message}")
        return super()._map(exc, scope)

    def _is_404(self, exc: Exception) -> bool:
        return getattr(exc, "status_code", None) == 404

    async def _get_or_none(self, fn: Any, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        """`fn(...)`'s answer as wire JSON, or None when the resource (or its group) does not exist."""

        def call() -> dict[str, Any] | None:
            from azure.core.exceptions import ResourceNotFoundError

            try:
                return dict(fn(*args, **kwargs).as_dict())
            except ResourceNotFoundError:
                return None

        return await self._sdk(call)

    async def _wait(self, poller: Any, within: float) -> bool:
        """Whether the SDK's poller (polling on its own thread) reached its end within `within` seconds."""
        loop = asyncio.get_running_loop()
        done = asyncio.Event()
        poller.add_done_callback(lambda _: loop.call_soon_threadsafe(done.set))
        try:
            await asyncio.wait_for(done.wait(), within)
        except TimeoutError:
            return False
        return True

    async def _delete(self, ops: Any, group: str, name: str) -> None:
        def delete() -> None:
            from azure.core.exceptions import ResourceNotFoundError

            try:
                ops.begin_delete(group, name, polling=polling()).result()
            except ResourceNotFoundError:  # the resource group is gone: so is the resource
                pass

        await self._sdk(delete)

    async def aclose(self) -> None:
        clients, self._clients = self._clients, None
        if clients is not None:
            for client in (clients.compute, clients.network, clients.resource, clients.credential):
                await self._sdk(client.close)
        await super().aclose()

