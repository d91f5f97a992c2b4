"""Client for the /_fake admin API. Sync by default; `.aio` gives the same methods as coroutines.

    admin = FakeCloudAdmin("http://127.0.0.1:8765")
    admin.add_fault("lambda", "create", "capacity", region="us-east-1")
    await admin.aio.add_fault("local", "create", "latency", seconds=2, when="after")
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from collections.abc import Callable
from typing import Any

import httpx

Pick = Callable[[Any], Any]


class FakeCloudAdminError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"fake cloud admin call failed ({status}): {body}")
        self.status = status
        self.body = body


@functools.cache
def _tls() -> ssl.SSLContext:
    # A client of its own for every call, but one TLS context for all: httpx would load the CA
    # bundle anew for each client (~30 ms CPU), and the tests make thousands of admin calls.
    return ssl.create_default_context()


def _decode(resp: httpx.Response) -> Any:
    body = resp.json() if resp.content else None
    if resp.status_code >= 400:
        raise FakeCloudAdminError(resp.status_code, body)
    return body


class FakeCloudAdmin:
    def __init__(self, base_url: str, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    @property
    def aio(self) -> AsyncFakeCloudAdmin:
        return AsyncFakeCloudAdmin(self.base_url, self.timeout)

    def _request(self, method: str, path: str, json: Any = None, pick: Pick | None = None) -> Any:
        with httpx.Client(timeout=self.timeout, verify=_tls()) as client:
            body = _decode(client.request(method, f"{self.base_url}/_fake{path}", json=json))
        return pick(body) if pick else body

    # -- faults
    def add_fault(self, facade: str, op: str, kind: str, times: int = 1, **params: Any) -> Any:
        """Add a rule (see README: kinds and parameters); returns it, with its id."""
        return self._request("POST", "/faults", {"facade": facade, "op": op, "kind": kind, "times": times,
                                                 **params})

    def faults(self) -> Any:
        return self._request("GET", "/faults", pick=lambda b: b["faults"])

    def clear_faults(self) -> Any:
        return self._request("DELETE", "/faults")

    # -- machines
    def machines(self) -> Any:
        """Every machine ever made (terminated too), with billing_seconds, status, ssh_port, home."""
        return self._request("GET", "/machines", pick=lambda b: b["machines"])

    def machine(self, machine_id: str) -> Any:
        return self._request("GET", f"/machines/{machine_id}")

    def kill(self, machine_id: str) -> Any:
        """The machine dies now: SSH stops, status error (it still bills until terminated)."""
        return self._request("POST", f"/machines/{machine_id}/die")

    def boot_now(self, machine_id: str) -> Any:
        """A booting machine's boot ends now, whatever delay it was created with: a test reads it
        booting while boots are held (`configure(hold_boots=True)`: no race with its boot however
        slow the host), then lets it come up."""
        return self._request("POST", f"/machines/{machine_id}/boot")

    def preempt(self, machine_id: str, notice_s: float = 0.0) -> Any:
        """The cloud takes the machine back: it is gone (not billing), with detail `preempted`. With
        `notice_s`, its interruption notice is out that long first while the machine still runs
        (AWS: two minutes, GCP: thirty seconds; each simulation shows it as its cloud's API does)."""
        return self._request("POST", f"/machines/{machine_id}/preempt", {"notice_s": notice_s})

    def side_resources(self) -> Any:
        """Account-level resources that outlive machines: `{facade, kind, id, name}` (Lambda's SSH keys,
        and the rows each facade's `side_resources` lists)."""
        return self._request("GET", "/side-resources", pick=lambda b: b["side_resources"])

    def tls(self) -> Any:
        """`{url, ca_pem}` of the server's TLS listener (for facades whose SDK talks only https)."""
        return self._request("GET", "/tls")

    # -- knobs
    def set_stock(self, instance_type: str, region: str, count: int, facade: str | None = None) -> Any:
        """`facade` is needed only when several facades sell a type of that name."""
        body: dict[str, Any] = {"instance_type": instance_type, "region": region, "count": count}
        if facade is not None:
            body["facade"] = facade
        return self._request("PUT", "/stock", body)

    def stock(self) -> Any:
        return self._request("GET", "/stock", pick=lambda b: b["stock"])

    def configure(self, *, boot_delay: float | None = None, terminate_delay: float | None = None,
                  quota: dict[str, int | None] | None = None, time_scale: float | None = None,
                  hold_boots: bool | None = None) -> Any:
        """`hold_boots`: machines created from now on boot only when `boot_now(id)` says (their boot
        delay a week meanwhile); what depends on `boot_delay` alone, like GCP's insert operation,
        keeps it. `terminate_delay` counts for terminations under way too: lengthened, it holds
        machines terminating; shortened, they end."""
        body: dict[str, Any] = {}
        if hold_boots is not None:
            body["hold_boots"] = hold_boots
        if time_scale is not None:
            body["time_scale"] = time_scale
        if boot_delay is not None:
            body["boot_delay"] = boot_delay
        if terminate_delay is not None:
            body["terminate_delay"] = terminate_delay
        if quota is not None:
            body["quota"] = quota
        return self._request("PUT", "/config", body)

    def calls(self) -> Any:
        """Per facade, the names of the calls served since `clear_calls` (fakeclouds/calls.py)."""
        return self._request("GET", "/calls", pick=lambda b: b["calls"])

    def call_counts(self) -> Any:
        """Per facade, how many of each call were served since `clear_calls`."""
        return self._request("GET", "/calls", pick=lambda b: b["counts"])

    def ssh_logins(self) -> Any:
        """Per running machine (its id), the SSH logins its server accepted since `clear_calls`."""
        return self._request("GET", "/calls", pick=lambda b: b["ssh_logins"])

    def clear_calls(self) -> Any:
        return self._request("DELETE", "/calls")

    def reset(self) -> Any:
        """A fresh cloud: terminate and forget every machine, clear faults, restore stock and quotas."""
        return self._request("POST", "/reset")

    def live_machines(self) -> list[dict[str, Any]]:
        """Machines that are not terminated (i.e. still billing). Sync only."""
        return [m for m in self.machines() if m["status"] != "terminated"]

    def wait_status(self, machine_id: str, status: str, timeout: float = 10.0) -> dict[str, Any]:
        """Poll until the machine has `status`. Sync only."""
        deadline = time.monotonic() + timeout
        while True:
            m: dict[str, Any] = self.machine(machine_id)
            if m["status"] == status:
                return m
            if time.monotonic() > deadline:
                raise TimeoutError(f"machine {machine_id} is {m['status']!r}, not {status!r}")
            time.sleep(0.05)


class AsyncFakeCloudAdmin(FakeCloudAdmin):
    """Same methods as FakeCloudAdmin; each returns a coroutine."""

    def _request(self, method: str, path: str, json: Any = None, pick: Pick | None = None) -> Any:
        async def go() -> Any:
            async with httpx.AsyncClient(timeout=self.timeout, verify=_tls()) as client:
                body = _decode(await client.request(method, f"{self.base_url}/_fake{path}", json=json))
            return pick(body) if pick else body
        return go()

    async def live_machines(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return [m for m in await self.machines() if m["status"] != "terminated"]

    async def wait_status(self, machine_id: str, status: str,  # type: ignore[override]
                          timeout: float = 10.0) -> dict[str, Any]:  # noqa: ASYNC109
        deadline = time.monotonic() + timeout
        while True:
            m: dict[str, Any] = await self.machine(machine_id)
            if m["status"] == status:
                return m
            if time.monotonic() > deadline:
                raise TimeoutError(f"machine {machine_id} is {m['status']!r}, not {status!r}")
            await asyncio.sleep(0.05)
