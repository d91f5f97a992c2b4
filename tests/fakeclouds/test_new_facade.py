"""A new cloud's simulation is one module with FACADE plus one line in the simulation's list:
tiny_cloud.py, declared the way a separately installed package would (an entry point in
gpuprov.simulations). The product's registry is not involved."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncssh
import httpx
import pytest

from fakeclouds import clouds
from fakeclouds.engine import Engine
from fakeclouds.facade import Facade
from fakeclouds.server import FakeCloudServer, parse_tokens
from providers import registry
from tests.fakeclouds import tiny_cloud
from tests.fakeclouds.helpers import eventually


def declare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry_points: str) -> None:
    """A distribution on sys.path whose metadata declares `entry_points` in gpuprov.simulations."""
    dist = tmp_path / "tiny_cloud_sim-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-cloud-sim\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{clouds.ENTRY_POINT_GROUP}]\n{entry_points}")
    monkeypatch.syspath_prepend(str(tmp_path))
    clouds.declared.cache_clear()


@pytest.fixture
def fresh_declarations() -> Iterator[None]:
    yield
    clouds.declared.cache_clear()  # the next caller sees sys.path without it (monkeypatch restores it)


@pytest.fixture
def tiny_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_declarations: None) -> None:
    declare(tmp_path, monkeypatch, "tiny = tests.fakeclouds.tiny_cloud:FACADE\n")


def test_the_simulation_lists_the_new_cloud(tiny_installed: None, tmp_path: Path) -> None:
    assert {"local", "lambda", "tiny"} <= set(clouds.simulated())
    assert clouds.simulated()[-1] == "tiny"  # the built-in ones first
    assert clouds.facade("tiny") is tiny_cloud.FACADE
    assert "tiny" not in registry.known()  # the product's registry knows nothing of it
    facades = clouds.all_facades()
    assert all(isinstance(f, Facade) for f in facades) and [f.name for f in facades] == clouds.simulated()
    names = list(Engine(facades=facades, state_dir=tmp_path).facades)
    assert names == clouds.simulated()
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
    local = clouds.facade("local")
    with pytest.raises(ValueError, match="two facades"):
        Engine(facades=[local, dataclasses.replace(local, prefix="/other")])
    for prefix in ("/local/v1", "/local", "/local/v1/x", "/_fake", "/_fake/x", "nope"):
        with pytest.raises(ValueError, match="prefix"):
            Engine(facades=[local, dataclasses.replace(local, name="other", prefix=prefix)])


def test_a_module_entry_point_means_its_facade(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               fresh_declarations: None) -> None:
    declare(tmp_path, monkeypatch, "tiny = tests.fakeclouds.tiny_cloud\n")
    assert clouds.facade("tiny") is tiny_cloud.FACADE


def test_bad_declarations_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      fresh_declarations: None) -> None:
    with pytest.raises(LookupError, match="'nimbus' has no simulation; simulated: local, lambda"):
        clouds.facade("nimbus")
    declare(tmp_path, monkeypatch, "other = tests.fakeclouds.tiny_cloud:FACADE\n"
                                   "local = tests.fakeclouds.tiny_cloud:FACADE\n")
    with pytest.raises(ValueError, match="'local' is simulated twice"):
        clouds.simulated()
    (tmp_path / "tiny_cloud_sim-0.1.dist-info" / "entry_points.txt").write_text(
        f"[{clouds.ENTRY_POINT_GROUP}]\nother = tests.fakeclouds.tiny_cloud:FACADE\n"
        "notafacade = tests.fakeclouds.tiny_cloud:NAME\n")
    clouds.declared.cache_clear()
    with pytest.raises(ValueError, match="simulates 'tiny', but is declared as cloud 'other'"):
        clouds.facade("other")
    with pytest.raises(TypeError, match="is not a fakeclouds.facade.Facade"):
        clouds.facade("notafacade")
