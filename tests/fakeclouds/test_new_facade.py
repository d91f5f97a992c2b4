"""A new cloud's simulation is one module with FACADE plus one registry entry: tiny_cloud.py,
registered the way a separately installed package would (an entry point in gpuprov.clouds)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncssh
import httpx
import pytest

from fakeclouds.engine import Engine
from fakeclouds.server import FakeCloudServer, parse_tokens
from providers import registry
from tests.fakeclouds import tiny_cloud
from tests.fakeclouds.helpers import eventually


@pytest.fixture
def tiny_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A distribution on sys.path whose metadata declares the tiny cloud's entry point."""
    dist = tmp_path / "tiny_cloud_sim-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-cloud-sim\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        f"[{registry.ENTRY_POINT_GROUP}]\ntiny = tests.fakeclouds.tiny_cloud:ENTRY\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.entries.cache_clear()
    yield
    registry.entries.cache_clear()  # the next caller sees sys.path without it (monkeypatch restores it)


def test_registry_lists_the_new_simulation(tiny_installed: None, tmp_path: Path) -> None:
    assert {"local", "lambda", "tiny"} <= set(registry.simulated())
    assert registry.simulation("tiny") is tiny_cloud.FACADE
    names = list(Engine(state_dir=tmp_path).facades)  # the engine's default: whatever the registry lists
    assert names == registry.simulated()
    assert parse_tokens("tiny=s3cret,local=l", names) == {"tiny": "s3cret", "local": "l"}
    with pytest.raises(ValueError, match="facades: .*tiny"):
        parse_tokens("nimbus=x", names)


async def test_server_serves_the_new_cloud_with_its_own_token_and_ssh(
        tiny_installed: None, ssh_key: asyncssh.SSHKey, pubkey: str) -> None:
    async with FakeCloudServer(boot_delay=0.05, tokens={"tiny": "s3cret"}) as cloud:
        assert cloud.tokens["tiny"] == "s3cret" and cloud.tokens["lambda"] == "lambda-dev-token"
        mine = {"Authorization": "Bearer s3cret"}
        async with httpx.AsyncClient(base_url=f"{cloud.url}/tiny/v1") as tiny:
            for wrong in ("tiny-dev-token", cloud.tokens["lambda"], cloud.tokens["local"]):
                r = await tiny.get("/boxes/none", headers={"Authorization": f"Bearer {wrong}"})
                assert r.status_code == 401 and r.json()["problem"] == "Unauthorized"

            # its fault rules and stock are addressed by its name, like any other facade's
            await cloud.admin.aio.add_fault("tiny", "create", "capacity")
            body = {"type": "tiny-t4", "region": "tiny-west", "key": pubkey, "name": "box"}
            assert (await tiny.post("/boxes", json=body, headers=mine)).status_code == 400
            await cloud.admin.aio.set_stock("tiny-t4", "tiny-west", 5)

            r = await tiny.post("/boxes", json=body, headers=mine)
            assert r.status_code == 201, r.text
            box = r.json()
            assert box["id"].startswith("box-") and box["state"] == "pending"
            r = await tiny.post("/boxes", json=body, headers=mine)
            assert r.status_code == 400 and "already exists" in r.json()["why"]  # its names are unique

            async def running() -> dict[str, Any] | None:
                got: dict[str, Any] = (await tiny.get(f"/boxes/{box['id']}", headers=mine)).json()
                return got if got["state"] == "running" else None
            box = await eventually(running, "the box to boot")

        async with asyncssh.connect(box["address"], 22, username=tiny_cloud.LOGIN_USER,
                                    client_keys=[ssh_key], known_hosts=None, agent_path=None,
                                    connect_timeout=30) as conn:
            lines = str((await conn.run("tiny-agent && nvidia-smi -L")).stdout).splitlines()
            assert lines[0] == "tiny-agent ok"  # its image's tool
            assert lines[1].startswith("GPU 0: Tesla T4 (UUID: GPU-")  # its GPU type's simulated driver
        assert (await cloud.admin.aio.machine(box["id"]))["facade"] == "tiny"


def test_clashing_declarations_are_refused() -> None:
    local = registry.simulation("local")
    with pytest.raises(ValueError, match="two facades"):
        Engine(facades=[local, dataclasses.replace(local, prefix="/other")])
    for prefix in ("/local/v1", "/local", "/local/v1/x", "/_fake", "/_fake/x", "nope"):
        with pytest.raises(ValueError, match="prefix"):
            Engine(facades=[local, dataclasses.replace(local, name="other", prefix=prefix)])
