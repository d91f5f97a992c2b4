"""GET /instances/{id}/kubeconfig: read from the machine over the pinned SSH path (a real SSH server,
fakeclouds/ssh.py, with the simulated k3s in its home), pointed where the client will dial, recorded
per fetch, never stored; refused with the reason where it cannot be had."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import asyncssh
import httpx
import pytest
import sqlalchemy as sa
import yaml
from sqlmodel import Session, select

from fakeclouds import k3s
from fakeclouds.ssh import MachineSSH
from store.identity import ssh_identity
from store.models import Instance, KubeconfigFetch
from store.secrets import SecretBox
from tests.api.conftest import make_project

HOST = "127.0.0.1"


def add_instance(engine: sa.Engine, iid: str, *, provider: str = "lambda", port: int = 22,
                 status: str = "ready", pin: str | None = None, project: str = "default",
                 note: str | None = "Kubernetes API (6443) opened at create to 127.0.0.1/32 only") -> None:
    with Session(engine) as s:
        s.add(Instance(id=iid, project=project, provider=provider, connection_id="c1",
                       workflow_id=f"allocation-{iid}", status=status, phase=status, ssh_host=HOST,
                       ssh_port=port, ssh_user="ubuntu", key="k1", cloud_instance_id="m-1", note=note,
                       host_key=pin, host_key_machine="k1/m-1" if pin else None))
        s.commit()


@pytest.fixture
async def machine(tmp_path: Path, engine: sa.Engine, box: SecretBox) -> Any:
    """A machine gpuprov may log in to (its installation key authorized), k3s running (simulated)."""
    with Session(engine) as s:
        public, _ = ssh_identity(s, box)
    home = tmp_path / "m-1" / "home"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "k3s").write_text(k3s.SCRIPT)
    (home / "bin" / "k3s").chmod(0o755)
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    server = MachineSSH(home=home, host_key=host_key, user="ubuntu", public_keys=[public])
    port = await server.start(HOST, 0)
    env = {**server._env(), "HOME": str(home)}
    await asyncio.to_thread(subprocess.run, [str(home / "bin" / "k3s"), "server", "--tls-san", "203.0.113.9"],
                            env=env, check=True, capture_output=True)
    yield port, host_key.export_public_key().decode().strip(), home
    await server.stop()


async def test_a_direct_clouds_kubeconfig_points_at_the_machine_and_each_fetch_is_recorded(
        client: httpx.AsyncClient, engine: sa.Engine, machine: Any) -> None:
    port, pin, home = machine
    add_instance(engine, "i-direct", port=port, pin=pin)
    r = await client.get("/api/compute/instances/i-direct/kubeconfig")
    assert r.status_code == 200, r.text
    assert r.headers["cache-control"] == "no-store"
    body = r.json()
    assert (body["access"], body["server"], body["note"]) == ("direct", f"https://{HOST}:6443", None)
    cfg = yaml.safe_load(body["kubeconfig"])
    on_machine = yaml.safe_load((home / ".simulated-k3s" / "k3s.yaml").read_text())
    assert cfg["clusters"][0]["cluster"] == {
        "server": f"https://{HOST}:6443",
        "certificate-authority-data": on_machine["clusters"][0]["cluster"]["certificate-authority-data"]}
    assert cfg["users"][0]["user"] == on_machine["users"][0]["user"]  # the admin certificate and key
    assert cfg["current-context"] == "gpuprov-i-direct"

    assert (await client.get("/api/compute/instances/i-direct/kubeconfig")).status_code == 200
    fetches = (await client.get("/api/compute/instances/i-direct/kubeconfig-fetches")).json()
    assert [(f["principal"], f["access"]) for f in fetches] == [("admin", "direct")] * 2
    key = cfg["users"][0]["user"]["client-key-data"]
    with Session(engine) as s:  # recorded who and when; the credential itself nowhere
        assert len(s.exec(select(KubeconfigFetch)).all()) == 2
        rows = [str(row) for model in (KubeconfigFetch, Instance) for row in s.exec(select(model)).all()]
    assert not any(key in row for row in rows)


async def test_a_tunnel_cloud_points_at_the_tunnels_end_and_says_so(
        client: httpx.AsyncClient, engine: sa.Engine, machine: Any) -> None:
    port, pin, _ = machine
    add_instance(engine, "i-verda", provider="verda", port=port, pin=pin, note=None)
    body = (await client.get("/api/compute/instances/i-verda/kubeconfig")).json()
    assert (body["access"], body["server"]) == ("tunnel", "https://127.0.0.1:6443")
    assert "gpuprov tunnel" in body["note"]


async def test_a_machine_showing_another_host_key_is_refused_before_anything_is_read(
        client: httpx.AsyncClient, engine: sa.Engine, machine: Any) -> None:
    port, _, _ = machine
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    add_instance(engine, "i-changed", port=port, pin=other)
    r = await client.get("/api/compute/instances/i-changed/kubeconfig")
    assert r.status_code == 502 and "host key changed" in r.json()["detail"], r.text
    assert (await client.get("/api/compute/instances/i-changed/kubeconfig-fetches")).json() == []


@pytest.mark.parametrize(("provider", "reason"), [("runpod", "RunPod has no Kubernetes API access"),
                                                  ("docker", "has no Kubernetes API access")])
async def test_clouds_without_k3s_refuse_with_their_reason(client: httpx.AsyncClient, engine: sa.Engine,
                                                           provider: str, reason: str) -> None:
    add_instance(engine, f"i-{provider}", provider=provider)
    r = await client.get(f"/api/compute/instances/i-{provider}/kubeconfig")
    assert r.status_code == 409 and reason in r.json()["detail"], r.text


async def test_not_ready_unknown_and_another_projects_instance(client: httpx.AsyncClient,
                                                               engine: sa.Engine) -> None:
    add_instance(engine, "i-booting", status="provisioning")
    r = await client.get("/api/compute/instances/i-booting/kubeconfig")
    assert r.status_code == 409 and "is provisioning" in r.json()["detail"]
    assert (await client.get("/api/compute/instances/nope/kubeconfig")).status_code == 404
    token = await make_project(client, "other")
    add_instance(engine, "i-theirs", project="default")
    r = await client.get("/api/compute/instances/i-theirs/kubeconfig",
                         headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 404


async def test_a_machine_without_k3s_says_so(client: httpx.AsyncClient, engine: sa.Engine,
                                             machine: Any) -> None:
    port, pin, home = machine
    (home / "bin" / "k3s").unlink()
    add_instance(engine, "i-nok3s", port=port, pin=pin)
    r = await client.get("/api/compute/instances/i-nok3s/kubeconfig")
    assert r.status_code == 409 and "k3s is not installed" in r.json()["detail"], r.text
