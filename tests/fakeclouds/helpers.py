from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from fakeclouds.engine import Engine

# Waits are on conditions; the deadline only bounds a failure, so it is generous (busy 2-core CI).
WITHIN = 30.0


async def eventually(check: Callable[[], Any], what: str, within: float = WITHIN) -> Any:
    """Poll `check` (sync or async) until it returns something truthy; return that."""
    deadline = time.monotonic() + within
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        assert time.monotonic() < deadline, f"still waiting for {what}"
        await asyncio.sleep(0.02)


async def create_local(client: httpx.AsyncClient, pubkey: str, name: str = "m1",
                       **fields: Any) -> httpx.Response:
    body = {"name": name, "instance_type": "cpu-small", "region": "local-1", "ssh_public_keys": [pubkey],
            **fields}
    return await client.post("/machines", json=body)


async def wait_local(client: httpx.AsyncClient, machine_id: str, status: str = "running",
                     within: float = WITHIN) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while True:
        m = (await client.get(f"/machines/{machine_id}")).json()
        if m.get("status") == status:
            return m
        assert time.monotonic() < deadline, f"machine stayed {m}"
        await asyncio.sleep(0.03)


async def wait_gone(client: httpx.AsyncClient, path: str, within: float = WITHIN) -> None:
    """Poll `path` until it answers 404."""
    deadline = time.monotonic() + within
    while (await client.get(path)).status_code != 404:
        assert time.monotonic() < deadline, f"{path} still there"
        await asyncio.sleep(0.03)


async def lambda_key(client: httpx.AsyncClient, pubkey: str, name: str = "k1") -> None:
    keys = (await client.get("/ssh-keys")).json()["data"]
    if not any(k["name"] == name for k in keys):
        r = await client.post("/ssh-keys", json={"name": name, "public_key": pubkey})
        assert r.status_code == 200, r.text


async def launch_lambda(client: httpx.AsyncClient, pubkey: str, **fields: Any) -> httpx.Response:
    await lambda_key(client, pubkey)
    body = {"region_name": "us-east-1", "instance_type_name": "gpu_1x_a10", "ssh_key_names": ["k1"],
            "name": "job", **fields}
    return await client.post("/instance-operations/launch", json=body)


async def wait_lambda(client: httpx.AsyncClient, instance_id: str, status: str = "active",
                      within: float = WITHIN) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while True:
        r = await client.get(f"/instances/{instance_id}")
        inst = r.json().get("data", {})
        if inst.get("status") == status:
            return inst
        assert time.monotonic() < deadline, f"instance stayed {r.json()}"
        await asyncio.sleep(0.03)


async def wait_engine(engine: Engine, machine_id: str, status: str) -> None:
    """Wait for a machine of an engine running on this test's loop to reach `status`."""
    await eventually(lambda: engine.machines[machine_id].status == status,
                     f"{machine_id} to be {status}")
