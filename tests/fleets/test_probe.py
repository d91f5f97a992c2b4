"""The probe end to end: POST /api/compute/fleets starts FleetProbeWorkflow on the session's Temporal
dev server; its activity logs in to real SSH servers (fakeclouds/ssh.py MachineSSH, each on its own
127.x.y.z address with a simulated nvidia-smi in ~/bin), and GET shows each host's answer.

The bastion case: the hidden host's SSH server listens on a Unix socket only, and the fleet names it
`gpu-hidden.invalid` (RFC 6761: never resolves). Only the bastion (an asyncssh server whose
direct-tcpip handler maps that name to the socket) reaches it; the test proves a direct connection
fails. (Not a network namespace: simpler and portable; the bastion is the only way in all the same.)
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import tempfile
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh
import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client
from temporalio.worker import Worker

from activities.deps import ActivityDeps
from activities.fleet import FleetActivities
from activities.health import HealthActivities
from api.app import create_app
from api.deps import AppDeps, TemporalGateway
from fakeclouds.catalog import Gpu, InstanceType
from fakeclouds.nvidia_smi import script_for
from fakeclouds.ssh import MachineSSH, _Auth
from messages.fleet import FleetProbeResult
from messages.health import HealthInput, HealthSummary
from messages.ids import fleet_probe_workflow_id
from store.models import Fleet
from store.secrets import SecretBox
from tests.api.conftest import TOKEN
from worker import workflow_runner
from workflows.fleet_probe import FleetProbeWorkflow
from workflows.health import HealthWorkflow

HIDDEN = "gpu-hidden.invalid"


def gpu_type(name: str, smi_name: str, memory_mib: int, count: int) -> InstanceType:
    return InstanceType(name=name, description="", gpu_description=None, vcpus=1, memory_gib=1, storage_gib=1,
                        gpu=Gpu(name=name, smi_name=smi_name, memory_mib=memory_mib, count=count), prices={})


def make_home(root: Path, name: str, *, gpus: InstanceType | None, docker: bool, sudo: bool) -> Path:
    home = root / name
    (home / "bin").mkdir(parents=True)
    scripts = {"sudo": f"#!/bin/sh\nexit {0 if sudo else 1}\n"}
    if gpus is not None:
        scripts["nvidia-smi"] = script_for(gpus, name)
    if docker:
        scripts["docker"] = "#!/bin/sh\necho simulated docker\n"
    for script, text in scripts.items():
        (home / "bin" / script).write_text(text)
        (home / "bin" / script).chmod(0o755)
    (home / "data.txt").write_text("the host's own files\n")
    return home


def snapshot(home: Path) -> dict[str, bytes]:
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file()}


class _Bridge(asyncssh.SSHTCPSession[bytes]):
    """A direct-tcpip channel joined to a Unix socket connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, chan: asyncssh.SSHTCPChannel[bytes]) -> None:
        self.task = asyncio.ensure_future(self._pump(chan))

    async def _pump(self, chan: asyncssh.SSHTCPChannel[bytes]) -> None:
        while data := await self.reader.read(65536):
            chan.write(data)
        chan.close()

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        self.writer.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.writer.close()
        if self.task is not None:
            self.task.cancel()


class _Bastion(asyncssh.SSHServer):
    def __init__(self, user: str, key: asyncssh.SSHKey, hidden_socket: str) -> None:
        self.user, self.key, self.hidden_socket = user, key, hidden_socket
        self.forwarded: list[tuple[str, int]] = []

    def begin_auth(self, username: str) -> bool:
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return username == self.user and key.public_data == self.key.public_data

    def connection_requested(self, dest_host: str, dest_port: int, orig_host: str, orig_port: int) -> Any:
        if dest_host != HIDDEN:
            return False
        return self._bridge()

    async def _bridge(self) -> _Bridge:
        reader, writer = await asyncio.open_unix_connection(self.hidden_socket)
        return _Bridge(reader, writer)


@dataclass
class Lab:
    port: int  # every host's sshd port (the fleet has one)
    direct: list[str]  # two reachable hosts, one where nothing listens, one refusing the key
    homes: dict[str, Path]
    bastion_host: str
    bastion_port: int
    root: Path  # a scratch directory for more homes
    servers: dict[str, MachineSSH]  # by address
    host_key: asyncssh.SSHKey  # the hosts' host key


@pytest.fixture
async def lab() -> AsyncIterator[Lab]:
    root = Path(tempfile.mkdtemp(prefix="fl", dir="/tmp"))  # short: a Unix socket path is < 108 chars
    key = FLEET_KEY
    public = key.export_public_key().decode()
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    net = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}"
    a, b, down, jump, wrong = (f"{net}.{i}" for i in (11, 12, 13, 14, 15))
    homes = {
        a: make_home(root, "a", gpus=gpu_type("H100", "NVIDIA H100 80GB HBM3", 81559, 2), docker=True,
                     sudo=True),
        b: make_home(root, "b", gpus=gpu_type("A10", "NVIDIA A10", 23028, 1), docker=False, sudo=False),
        HIDDEN: make_home(root, "hidden", gpus=gpu_type("L4", "NVIDIA L4", 23034, 4), docker=True, sudo=True),
    }
    servers = {h: MachineSSH(home=home, host_key=host_key, user="ubuntu", public_keys=[public],
                             env={"PATH": f"{home / 'bin'}:/usr/bin:/bin"}) for h, home in homes.items()}
    port = await servers[a].start(a)
    await servers[b].start(b, port)
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    refusing = MachineSSH(home=root / "wrong", host_key=host_key, user="ubuntu", public_keys=[other])
    await refusing.start(wrong, port)
    servers["wrong"] = refusing
    # The hidden host: a Unix socket only.
    hidden = servers[HIDDEN]
    path = str(root / "hidden.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen()
    hidden_acceptor = await asyncssh.listen(
        sock=sock, server_factory=lambda: _Auth("ubuntu", hidden.keys, hidden.home),
        server_host_keys=[host_key], process_factory=hidden._handle, encoding=None)
    bastion = await asyncssh.listen(jump, 0, server_factory=lambda: _Bastion("jump", key, path),
                                    server_host_keys=[host_key])
    try:
        yield Lab(port=port, direct=[a, b, down, wrong], homes=homes, bastion_host=jump,
                  bastion_port=bastion.sockets[0].getsockname()[1], root=root, host_key=host_key,
                  servers=servers)
    finally:
        bastion.close()
        hidden_acceptor.close()
        for server in servers.values():
            await server.stop()


FLEET_KEY = asyncssh.generate_private_key("ssh-ed25519")


class Api(httpx.AsyncClient):
    task_queue: str  # where the test's worker runs the probe (and health) workflows


@pytest.fixture
async def api(engine: sa.Engine, box: SecretBox, temporal_client: Client) -> AsyncIterator[Api]:
    """The real app, its workflow gateway on the session's Temporal, a worker of the probe only."""
    queue = f"fleet-tests-{uuid.uuid4().hex[:8]}"
    gateway = TemporalGateway("unused", "default", queue, keys=[])
    gateway._client = temporal_client
    deps = ActivityDeps(engine=engine, box=box, installation_id="fleet001", client=temporal_client)
    activities, health = FleetActivities(deps), HealthActivities(deps)
    worker = Worker(temporal_client, task_queue=queue, workflows=[FleetProbeWorkflow, HealthWorkflow],
                    activities=[activities.fleet_hosts, activities.probe_fleet_host, health.health_targets,
                                health.check_connection, health.record_health],
                    activity_executor=ThreadPoolExecutor(4), workflow_runner=workflow_runner())
    app = create_app(AppDeps(engine=engine, box=box, api_token=TOKEN, installation_id="fleet001",
                             workflows=gateway))
    async with worker, Api(transport=httpx.ASGITransport(app=app), base_url="http://api",
                           headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        c.task_queue = queue
        yield c


def probe_workflow_id(engine: sa.Engine, fleet_id: str) -> str:
    with Session(engine) as s:
        row = s.get(Fleet, fleet_id)
        assert row is not None and row.probe_id is not None
        return fleet_probe_workflow_id(fleet_id, row.probe_id)


async def probed(client: Client, workflow_id: str) -> FleetProbeResult:
    handle = client.get_workflow_handle(workflow_id, result_type=FleetProbeResult)
    result: FleetProbeResult = await asyncio.wait_for(handle.result(), 60)
    return result


async def test_probe_reports_each_host_and_the_key_is_nowhere(
        api: httpx.AsyncClient, lab: Lab, temporal_client: Client, engine: sa.Engine,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    pem = FLEET_KEY.export_private_key().decode()
    secret_lines = [line for line in pem.splitlines() if line and not line.startswith("-----")]
    r = await api.post("/api/compute/fleets", json={"name": "rack", "port": lab.port, "private_key": pem,
                                                    "hosts": lab.direct})
    assert r.status_code == 201, r.text
    direct = r.json()
    # The hidden host: no direct way to it.
    with pytest.raises(OSError):
        await asyncio.open_connection(HIDDEN, lab.port)
    r = await api.post("/api/compute/fleets", json={
        "name": "behind", "port": lab.port, "private_key": pem, "hosts": [HIDDEN],
        "bastion": {"host": lab.bastion_host, "port": lab.bastion_port, "user": "jump"}})
    assert r.status_code == 201, r.text
    behind = r.json()
    await probed(temporal_client, probe_workflow_id(engine, direct["id"]))
    await probed(temporal_client, probe_workflow_id(engine, behind["id"]))

    got = (await api.get(f"/api/compute/fleets/{direct['id']}")).json()
    a, b, down, wrong = got["hosts"]
    assert a["reachable"] is True and a["gpu_summary"] == "2× H100 (80GB) · 160GB total"
    assert (a["gpu_vendor"], a["gpu_name"], a["gpu_count"], a["gpu_memory_gb"]) == ("nvidia", "H100", 2, 80)
    assert (a["docker"], a["sudo"], a["tcp_forwarding"]) == (True, True, True)
    assert b["reachable"] is True and b["gpu_summary"] == "1× A10 (22GB) · 22GB total"
    assert (b["docker"], b["sudo"]) == (False, False)
    assert down["reachable"] is False and down["reason"] == "connection refused"
    assert down["gpu_summary"] is None
    assert wrong["reachable"] is False and wrong["reason"] == "authentication failed (key refused)"
    assert all(h["probed_at"] is not None for h in got["hosts"])
    [hidden] = (await api.get(f"/api/compute/fleets/{behind['id']}")).json()["hosts"]
    assert hidden["reachable"] is True and hidden["gpu_summary"] == "4× L4 (22GB) · 88GB total", hidden

    # The key: in no answer, no log line, no workflow history (decoded by the codec, so in clear).
    listed = (await api.get("/api/compute/fleets")).text
    texts = [listed, caplog.text]
    for fleet in (direct, behind):
        handle = temporal_client.get_workflow_handle(probe_workflow_id(engine, fleet["id"]))
        history = await handle.fetch_history()
        texts.append(history.to_json())
    for text in texts:
        assert not any(line in text for line in secret_lines)

    # DELETE touches no host: their files are as they were, nothing ran there.
    before = {h: snapshot(home) for h, home in lab.homes.items()}
    for fleet in (direct, behind):
        assert (await api.delete(f"/api/compute/fleets/{fleet['id']}")).status_code == 200
    assert {h: snapshot(home) for h, home in lab.homes.items()} == before


async def health_run(client: Client, api: Api, fleet_id: str) -> HealthSummary:
    """What the `gpuprov-health` Schedule starts every interval, run now for this fleet only."""
    queue = api.task_queue
    summary: HealthSummary = await client.execute_workflow(
        HealthWorkflow.run, HealthInput(connection_ids=[], fleet_ids=[fleet_id]),
        id=f"health-test-{uuid.uuid4().hex[:8]}", task_queue=queue, result_type=HealthSummary)
    return summary


async def provider_row(api: httpx.AsyncClient, fleet_id: str) -> dict[str, Any]:
    [row] = [r for r in (await api.get("/api/compute/providers")).json()["items"] if r["id"] == fleet_id]
    return row


async def test_the_health_run_reprobes_fleets(api: Api, lab: Lab, temporal_client: Client,
                                              engine: sa.Engine) -> None:
    pem = FLEET_KEY.export_private_key().decode()
    a, b, down, _ = lab.direct
    r = await api.post("/api/compute/fleets", json={"name": "rack", "port": lab.port, "private_key": pem,
                                                    "hosts": [a, b, down]})
    fleet = r.json()
    await probed(temporal_client, probe_workflow_id(engine, fleet["id"]))
    row = await provider_row(api, fleet["id"])
    assert (row["status"], row["reason"]) == ("degraded", f"unreachable: {down} (connection refused)")
    assert (row["host_count"], row["gpu_count"]) == (3, 3)

    # The third host comes up: the next health run finds it without any save.
    home = make_home(lab.root, "late", gpus=gpu_type("L4", "NVIDIA L4", 23034, 4), docker=True, sudo=True)
    late = MachineSSH(home=home, host_key=lab.host_key, user="ubuntu",
                      public_keys=[FLEET_KEY.export_public_key().decode()],
                      env={"PATH": f"{home / 'bin'}:/usr/bin:/bin"})
    await late.start(down, lab.port)
    try:
        summary = await health_run(temporal_client, api, fleet["id"])
    finally:
        await late.stop()
    [result] = summary.probed
    assert [h.reachable for h in result.hosts] == [True, True, True]
    row = await provider_row(api, fleet["id"])
    assert (row["status"], row["reason"], row["gpu_count"]) == ("healthy", None, 7)


async def test_host_keys_are_pinned_on_first_use_and_a_changed_one_is_refused(
        api: Api, lab: Lab, temporal_client: Client, engine: sa.Engine) -> None:
    pem = FLEET_KEY.export_private_key().decode()
    a, b, _, _ = lab.direct
    body = {"name": "rack", "port": lab.port, "private_key": pem, "hosts": [a, b]}
    fleet = (await api.post("/api/compute/fleets", json=body)).json()
    await probed(temporal_client, probe_workflow_id(engine, fleet["id"]))
    pinned = lab.host_key.get_fingerprint("sha256")
    hosts = (await api.get(f"/api/compute/fleets/{fleet['id']}")).json()["hosts"]
    assert [h["host_key_fingerprint"] for h in hosts] == [pinned, pinned]

    # Host a is replaced by a server with another key, on the same address and port.
    await lab.servers[a].stop()
    other = asyncssh.generate_private_key("ssh-ed25519")
    imposter = MachineSSH(home=lab.homes[a], host_key=other, user="ubuntu",
                          public_keys=[FLEET_KEY.export_public_key().decode()])
    await imposter.start(a, lab.port)
    lab.servers[a] = imposter
    changed = f"host key changed: got {other.get_fingerprint('sha256')}, expected {pinned}"
    await health_run(temporal_client, api, fleet["id"])
    row = await provider_row(api, fleet["id"])
    assert (row["status"], row["reason"]) == ("degraded", f"unreachable: {a} ({changed})")
    # A PUT keeps the pins of the hosts it keeps: its probe refuses the new key too.
    assert (await api.put(f"/api/compute/fleets/{fleet['id']}", json={**body, "private_key": ""})).is_success
    await probed(temporal_client, probe_workflow_id(engine, fleet["id"]))
    ha, hb = (await api.get(f"/api/compute/fleets/{fleet['id']}")).json()["hosts"]
    assert (ha["reachable"], ha["reason"], ha["host_key_fingerprint"]) == (False, changed, pinned)
    assert (hb["reachable"], hb["host_key_fingerprint"]) == (True, pinned)

    # Re-trusted by the user: the next probe pins the new key.
    r = await api.post(f"/api/compute/fleets/{fleet['id']}/trust", json={"hosts": [a]})
    assert r.status_code == 200, r.text
    await probed(temporal_client, probe_workflow_id(engine, fleet["id"]))
    ha, hb = (await api.get(f"/api/compute/fleets/{fleet['id']}")).json()["hosts"]
    assert (ha["reachable"], ha["host_key_fingerprint"]) == (True, other.get_fingerprint("sha256"))
    assert hb["host_key_fingerprint"] == pinned
    assert (await provider_row(api, fleet["id"]))["status"] == "healthy"
