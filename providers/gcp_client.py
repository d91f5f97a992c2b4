"""The google-cloud-compute SDK behind the GCP adapter (providers/gcp.py): its clients, built once
per adapter against the connection's endpoint and CA, every call bounded and without the SDK's
retries (Temporal owns retrying); Compute Engine's error codes and reasons as the taxonomy reads
them; operations, polled with our own operations clients; and the blocking calls the adapter runs
on the SDK thread pool. The SDK is imported on first use, never at module level.

`ComputeClient` is the adapter's base: `GcpProvider.__init__` sets what it reads (`project`, the
key's `_info`, the `_clients` cache and its `_lock`).
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Mapping
from typing import Any, ClassVar

from providers.base import AuthError, FailureScope, ProviderError, QuotaError
from providers.rest import ErrorKind, map_error
from providers.sdk import SdkCloudProvider, SdkError

CALL_TIMEOUT = 30.0  # seconds, one HTTP call (the SDK's retry layer is off: retry=None)

_CODES: dict[str, ErrorKind] = {
    # in an operation's error.errors[0].code
    "ZONE_RESOURCE_POOL_EXHAUSTED": "capacity",
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": "capacity",
    "QUOTA_EXCEEDED": "quota",
    "RESOURCE_OPERATION_RATE_EXCEEDED": "rate_limit",
    "INTERNAL_ERROR": "transient",
    # in an HTTP error's errors[0].reason
    "quotaExceeded": "quota",
    "rateLimitExceeded": "rate_limit",
    "userRateLimitExceeded": "rate_limit",
    "authError": "auth",
    "forbidden": "auth",
    "accessNotConfigured": "auth",
    "invalid": "invalid",
    "badRequest": "invalid",
    "notFound": "invalid",
    "alreadyExists": "invalid",
    "backendError": "transient",
    "internalError": "transient",
    "resourceNotReady": "transient",
}
_RATE_LIMITS = {code for code, kind in _CODES.items() if kind == "rate_limit"}


@functools.cache
def compute_v1() -> Any:
    """google.cloud.compute_v1, imported on first use (importing providers.gcp stays cheap)."""
    from google.cloud import compute_v1

    return compute_v1


class ComputeClient(SdkCloudProvider):
    """The SDK side of the GCP adapter: clients, calls, error reading, operations."""

    error_codes: ClassVar[Mapping[str, ErrorKind]] = _CODES
    project: str
    _info: dict[str, Any]
    _clients: dict[str, Any]
    _lock: threading.Lock

    def _client(self, kind: str) -> Any:
        """A cached SDK client (e.g. "InstancesClient"), built on first use (in a pool thread)."""
        with self._lock:
            client = self._clients.get(kind)
            if client is not None:
                return client
            compute = compute_v1()
            if "credentials" not in self._clients:
                from google.oauth2 import service_account

                try:
                    self._clients["credentials"] = service_account.Credentials.from_service_account_info(
                        self._info
                    )
                except (ValueError, KeyError) as exc:
                    raise AuthError(
                        f"{self.id}: the service-account key cannot be used ({type(exc).__name__})"
                    ) from None
            options = {"api_endpoint": self.options.endpoint.rstrip("/")} if self.options.endpoint else None
            client = getattr(compute, kind)(credentials=self._clients["credentials"], client_options=options)
            ca_file = self.ca_bundle_file()
            if ca_file:
                client._transport._session.verify = ca_file  # requests takes a path
            self._clients[kind] = client
            return client

    def _call(self, kind: str, method: str, **request: Any) -> Any:
        """One SDK call, blocking (run through self._sdk): no SDK retries, a bounded timeout."""
        return getattr(self._client(kind), method)(**request, retry=None, timeout=CALL_TIMEOUT)

    def sdk_error(self, exc: Exception) -> SdkError | None:
        from google.api_core import exceptions as api_exceptions
        from google.auth import exceptions as auth_exceptions

        if isinstance(exc, api_exceptions.GoogleAPICallError):
            first = exc.errors[0] if exc.errors and isinstance(exc.errors[0], dict) else {}
            reason = str(first.get("reason") or "")
            message = str(first.get("message") or exc.message)
            status = int(exc.code or 500) if isinstance(exc.code, int) else 500
            headers = getattr(exc.response, "headers", None) or {}
            retry_after = headers.get("Retry-After")
            if retry_after is None and (reason in _RATE_LIMITS or status == 429):
                # Compute Engine sends none: its per-minute quotas refill at the next minute.
                retry_after = str(max(1, 60 - int(time.time()) % 60))
            return SdkError(reason or str(status), message[:500], status, retry_after)
        if isinstance(exc, auth_exceptions.RefreshError | auth_exceptions.MalformedError):
            return SdkError("authError", f"credentials refused: {exc}"[:300], 401)
        return None

    def _op_error(self, op: Any, scope: FailureScope) -> ProviderError | None:
        """The taxonomy error of a DONE operation that failed (whatever httpErrorStatusCode says)."""
        errors = list(op.error.errors) if op.error else []
        if not errors:
            return None
        code, message = str(errors[0].code or ""), str(errors[0].message or "")
        status = int(op.http_error_status_code or 0) or 400
        if self.error_codes.get(code) == "quota":
            # "Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 1.0 globally." blocks every region.
            where = (
                FailureScope(provider=self.id)
                if "globally" in message or "ALL_REGIONS" in message
                else FailureScope(provider=self.id, region=scope.region)
            )
            return QuotaError(f"{self.id}: {code}: {message}", scope=where)
        return map_error(
            provider=self.id, code=code, message=message, status=status, scope=scope, codes=self.error_codes
        )

    async def _wait(self, op: Any, *, zone: str | None, within: float) -> Any | None:
        """Poll our own operations client until `op` is DONE; None if it is not within `within` s."""
        compute = compute_v1()
        deadline = time.monotonic() + within
        pause = 0.05
        while op.status != compute.Operation.Status.DONE:
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(pause)
            pause = min(pause * 2, 2.0)
            if zone:
                op = await self._sdk(
                    self._call,
                    "ZoneOperationsClient",
                    "get",
                    project=self.project,
                    zone=zone,
                    operation=op.name,
                )
            else:
                op = await self._sdk(
                    self._call, "GlobalOperationsClient", "get", project=self.project, operation=op.name
                )
        return op

    # ------------------------------------------------------------------ blocking helpers (pool threads)

    def _get_instance(self, zone: str, name: str) -> Any | None:
        from google.api_core import exceptions as api_exceptions

        try:
            return self._call("InstancesClient", "get", project=self.project, zone=zone, instance=name)
        except api_exceptions.NotFound:
            return None

    def _instances(self, flt: str) -> list[tuple[str, Any]]:
        """(zone, instance) for every instance matching `flt`, all zones."""
        compute = compute_v1()
        request = compute.AggregatedListInstancesRequest(project=self.project, filter=flt)
        found = []
        for scope, listed in self._call("InstancesClient", "aggregated_list", request=request):
            found += [(scope.rpartition("/")[2], inst) for inst in listed.instances]
        return found

    def _insert(self, zone: str, instance: Any, request_id: str) -> Any | None:
        """The insert's operation; None when the name is taken in the zone (409 alreadyExists)."""
        from google.api_core import exceptions as api_exceptions

        compute = compute_v1()
        request = compute.InsertInstanceRequest(
            project=self.project, zone=zone, instance_resource=instance, request_id=request_id
        )
        try:
            return self._call("InstancesClient", "insert_unary", request=request)
        except api_exceptions.Conflict:
            return None

    def _delete(self, kind: str, **where: Any) -> Any | None:
        """A delete's operation; None when already gone (404)."""
        from google.api_core import exceptions as api_exceptions

        try:
            return self._call(kind, "delete_unary", project=self.project, **where)
        except api_exceptions.NotFound:
            return None

    def _insert_firewall(self, firewall: Any) -> Any | None:
        from google.api_core import exceptions as api_exceptions

        try:
            return self._call(
                "FirewallsClient", "insert_unary", project=self.project, firewall_resource=firewall
            )
        except api_exceptions.Conflict:
            return None

    def _firewalls(self) -> list[Any]:
        prefix = f"gpuprov-{self.installation_id}-"  # [a-z0-9-]: nothing to escape in a regex
        return list(
            self._call(
                "FirewallsClient",
                "list",
                request=compute_v1().ListFirewallsRequest(
                    project=self.project, filter=f'name eq "{prefix}.*"'
                ),
            )
        )

