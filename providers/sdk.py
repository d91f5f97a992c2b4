"""The synchronous-SDK base: adapters of clouds whose official SDK blocks (boto3,
google-cloud-compute, azure-mgmt) build on `SdkCloudProvider`.

- Every SDK call runs on a thread pool shared by all SDK adapters of the process, never on the
  worker's event loop (heartbeats and other activities keep running while an SDK call waits).
- The SDK's own retry layer must be off or bounded (each adapter configures its client so, e.g.
  botocore `retries={"total_max_attempts": 1}`): Temporal owns retrying, so one activity never
  hides a multi-minute retry loop.
- Errors map by table: the adapter says how to read (code, message, HTTP status) off its SDK's
  exception (`sdk_error`), and `error_codes` says what each code means. No raw SDK exception escapes.
- A connection's `ca_bundle` (a private endpoint's or the simulation's TLS certificate) reaches every
  SDK the same way: one file, the default roots plus it (`ca_bundle_file`), removed by `aclose`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import tempfile
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from providers.base import CloudProvider, FailureScope, ProviderError, Transient
from providers.rest import ErrorKind, map_error

T = TypeVar("T")

SDK_THREADS = 32
_CA_LOCK = threading.Lock()  # two pool threads' first clients must not write two files


@functools.cache
def _executor() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=SDK_THREADS, thread_name_prefix="gpuprov-sdk")


class SdkError:
    """What an adapter reads off its SDK's exception."""

    __slots__ = ("code", "message", "status", "retry_after")

    def __init__(self, code: str, message: str, status: int, retry_after: str | None = None) -> None:
        self.code, self.message, self.status, self.retry_after = code, message, status, retry_after


class SdkCloudProvider(CloudProvider):
    """Base of adapters over a blocking SDK. Subclasses implement `sdk_error` and fill `error_codes`."""

    error_codes: ClassVar[Mapping[str, ErrorKind]] = {}
    _ca_file: str | None = None  # written by ca_bundle_file, on first use

    def ca_bundle_file(self) -> str | None:
        """The connection's `ca_bundle` beside the default roots, as one PEM file: boto3, requests
        (google-cloud) and azure-core take a path, and trust only that file once given one. The
        defaults are certifi's — what each of them trusts without one (botocore too, certifi being
        installed with requests). Written once per adapter, privately (mkstemp: 0600, though it holds
        only public certificates); removed by aclose. None: no bundle, the SDK's own default stands."""
        if not self.options.ca_bundle:
            return None
        with _CA_LOCK:
            if self._ca_file is None:
                import certifi

                fd, path = tempfile.mkstemp(prefix=f"gpuprov-{self.id}-ca-", suffix=".pem")
                with os.fdopen(fd, "w") as f:
                    f.write(Path(certifi.where()).read_text().rstrip("\n") + "\n" + self.options.ca_bundle)
                self._ca_file = path
            return self._ca_file

    async def aclose(self) -> None:
        """Remove the CA file (subclasses close their clients first, then call this)."""
        path, self._ca_file = self._ca_file, None
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def sdk_error(self, exc: Exception) -> SdkError | None:
        """(code, message, status) of an SDK exception; None for exceptions that are not the
        cloud's answer (those become Transient: a dropped connection, a timeout)."""
        return None

    async def _sdk(self, fn: Callable[..., T], *args: Any, scope: FailureScope | str | None = None,
                   **kwargs: Any) -> T:
        """Run one blocking SDK call on the shared pool; its failure as a taxonomy error."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(_executor(), functools.partial(fn, *args, **kwargs))
        except ProviderError:
            raise
        except Exception as exc:  # noqa: BLE001 — every SDK failure is mapped, none escapes raw
            raise self._map(exc, scope) from None

    def _map(self, exc: Exception, scope: FailureScope | str | None) -> ProviderError:
        err = self.sdk_error(exc)
        if err is None:  # not the cloud's answer: it may have acted on the request all the same
            return Transient(f"{self.id}: {type(exc).__name__}: {str(exc)[:300]}", in_doubt=True)
        return map_error(provider=self.id, code=err.code, message=err.message, status=err.status,
                         scope=scope, codes=self.error_codes, retry_after=err.retry_after)
