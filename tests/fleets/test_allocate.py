"""Allocating onto an SSH fleet (`--cloud ssh`) end to end: `POST /api/compute/instances` starts the
real AllocationWorkflow on the session's Temporal dev server; an in-process worker runs the real
activities; the fleet adapter (providers/ssh_fleet.py) claims hosts that are real SSH servers
(fakeclouds/ssh.py MachineSSH on 127.x.y.z, a simulated nvidia-smi in ~/bin). k3s goes in over SSH
from a SIMULATED installer served on loopback (fakeclouds/k3s.py INSTALLER, GPUPROV_K3S_INSTALL_URL).

Three hosts: two with H100s (one already has k3s and an authorized_keys file of its own), one where
nothing listens. Two allocations land on the two GPU hosts, the third finds no capacity and says
why; `down` leaves each host's files exactly as they were."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import subprocess
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import asyncssh
import httpx
import pytest
import sqlalchemy as sa
from temporalio.client import Client

from activities.deps import ActivityDeps
from api.app import create_app
from api.deps import AppDeps
from api.temporal import TemporalGateway
from fakeclouds.k3s import INSTALLER
from fakeclouds.k3s import SCRIPT as K3S
from fakeclouds.machine_processes import remove_once_unused
from fakeclouds.ssh import MachineSSH
from messages import workflows as wf
from messages.ids import attempt_key, watch_workflow_id
from messages.sweep import SweepInput, SweepSummary
from providers import registry
from providers.base import AuthError, CapacityError, LaunchSpec, Offer, OfferQuery, Ownership
from providers.ssh_fleet import SshFleetProvider
from store.secrets import SecretBox
from tests.api.conftest import TOKEN
from tests.eventually import eventually
from tests.fleets.test_probe import LOOPBACK, gpu_type, make_home, snapshot
from tests.jobs.conftest import FAST
from tests.openssh import openssh
from worker import build_worker

FLEET_KEY = asyncssh.generate_private_key("ssh-ed25519")
USER_KEY = asyncssh.generate_private_key("ssh-ed25519")
CLOUD = SshFleetProvider.id
# b's own authorized_keys: the fleet's key and another of the owner's, no final newline (kept so).
OTHER = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()


class _Installer(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 — the http.server API
        body = INSTALLER.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def k3s_url() -> Iterator[str]:
    """The SIMULATED k3s installer on a loopback HTTP server."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Installer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/k3s-install.sh"
    server.shutdown()


@dataclass
class Fleet:
    port: int
    a: str  # 2× H100, nothing of gpuprov's or k3s
    b: str  # 1× H100, k3s already installed, an authorized_keys file of its own
    down: str  # nothing listens
    homes: dict[str, Path]

    @property
    def hosts(self) -> list[str]:
        return [self.a, self.b, self.down]

    def credentials(self) -> dict[str, Any]:
        return {"ssh_user": "ubuntu", "ssh_port": self.port, "hosts": "\n".join(self.hosts),
                "private_key": FLEET_KEY.export_private_key().decode()}


@pytest.fixture
async def fleet() -> AsyncIterator[Fleet]:
    root = Path(tempfile.mkdtemp(prefix="fa", dir="/tmp"))
    net = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}"
    a, b, down = (f"{net}.{i}" for i in (21, 22, 23))
    homes = {a: make_home(root, "a", gpus=gpu_type("H100", "NVIDIA H100 80GB HBM3", 81559, 2), docker=True,
                          sudo=True),
             b: make_home(root, "b", gpus=gpu_type("H100", "NVIDIA H100 80GB HBM3", 81559, 1), docker=True,
                          sudo=True)}
    (homes[b] / "bin" / "k3s").write_text(K3S)
    (homes[b] / "bin" / "k3s").chmod(0o755)
    # ... and running: its (simulated) server state is there before gpuprov comes.
    await asyncio.to_thread(subprocess.run, [homes[b] / "bin" / "k3s", "server"],
                            env={**os.environ, "HOME": str(homes[b])}, check=True, capture_output=True)
    (homes[b] / ".ssh").mkdir(mode=0o700)
    fleet_public = FLEET_KEY.export_public_key().decode().strip()
    (homes[b] / ".ssh" / "authorized_keys").write_text(f"{fleet_public} owner\n{OTHER}")
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    servers = {
        a: MachineSSH(home=homes[a], host_key=host_key, user="ubuntu", public_keys=[fleet_public],
                      env={"PATH": f"{homes[a] / 'bin'}:/usr/bin:/bin"}),
        b: MachineSSH(home=homes[b], host_key=host_key, user="ubuntu", public_keys=[],  # its file only
                      env={"PATH": f"{homes[b] / 'bin'}:/usr/bin:/bin"}),
    }
    port = await servers[a].start(a)
    await servers[b].start(b, port)
    try:
        yield Fleet(port=port, a=a, b=b, down=down, homes=homes)
    finally:
        for server in servers.values():
            await server.stop()
        remove_once_unused(root)  # with whatever a job left running on the hosts' shims


@pytest.fixture
def queue() -> str:
    return f"fleet-alloc-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def api(engine: sa.Engine, box: SecretBox, temporal_client: Client, k3s_url: str,
              queue: str) -> AsyncIterator[httpx.AsyncClient]:
    """The real app, its workflow gateway on the session's Temporal, the real worker on its own queue."""
    gateway = TemporalGateway("unused", "default", queue, keys=[])
    gateway._client = temporal_client
    deps = ActivityDeps(engine=engine, box=box, installation_id="fleet002", client=temporal_client,
                        fleet_addresses=LOOPBACK,
                        k3s_install_url=k3s_url, watch_interval_s=1.0)
    app = create_app(AppDeps(engine=engine, box=box, api_token=TOKEN, installation_id="fleet002",
                             fleet_addresses=LOOPBACK,
                             workflows=gateway, job_timing=FAST, job_log_poll_s=0.1, job_queue_poll_s=0.3))
    async with build_worker(temporal_client, deps, task_queue=queue), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://api",
            headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        yield c


async def until(api: httpx.AsyncClient, instance_id: str, *statuses: str,
                kind: str = "instances") -> dict[str, Any]:
    """The instance (or, kind="jobs", the job) once its status is one of `statuses`."""
    async def read() -> dict[str, Any]:
        got: dict[str, Any] = (await api.get(f"/api/compute/{kind}/{instance_id}")).json()
        return got

    return await eventually(read, until=lambda got: got["status"] in statuses, within=120,
                            what=f"{kind} {instance_id} {' or '.join(statuses)}")


async def up(api: httpx.AsyncClient) -> str:
    r = await api.post("/api/compute/instances", json={
        "cloud": CLOUD, "gpu": "H100", "ssh_public_keys": [USER_KEY.export_public_key().decode().strip()]})
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


async def test_up_lands_on_free_gpu_hosts_and_down_leaves_each_as_it_was(
        api: httpx.AsyncClient, fleet: Fleet, tmp_path: Path) -> None:
    r = await api.post("/api/compute/fleets", json={
        "name": "rack", "port": fleet.port, "private_key": FLEET_KEY.export_private_key().decode(),
        "hosts": fleet.hosts})
    assert r.status_code == 201, r.text
    fleet_id = r.json()["id"]
    before = {h: snapshot(home) for h, home in fleet.homes.items()}
    page = (await api.get(f"/api/compute/backends/{CLOUD}/offers", params={"gpu": "H100"})).json()
    assert page["title"] == "SSH / On-prem — Available Instances"
    assert [(o["instance"], o["gpu_label"], o["price_per_hour"], o["region"]) for o in page["items"]] == [
        (fleet.a, "2× H100 (80GB)", 0, "on-prem"), (fleet.b, "1× H100 (80GB)", 0, "on-prem")], page

    first = await until(api, await up(api), "ready", "failed")
    assert first["status"] == "ready", first
    assert first["ssh"] == {"host": fleet.a, "port": fleet.port, "user": "ubuntu", "bastion": None}
    assert first["price_per_hour"] == 0 and first["cloud"] == CLOUD
    # The user's key logs in there with the real OpenSSH client.
    key_file = tmp_path / "id_ed25519"
    USER_KEY.write_private_key(str(key_file))
    key_file.chmod(0o600)
    login = await asyncio.to_thread(openssh, key_file, fleet.a, "cat data.txt && k3s kubectl get nodes",
                                    port=fleet.port)
    assert login.returncode == 0, login.stderr
    assert "the host's own files" in login.stdout and "Ready" in login.stdout  # k3s from the installer

    second = await until(api, await up(api), "ready", "failed")
    assert second["status"] == "ready" and second["ssh"]["host"] == fleet.b, second
    assert (await asyncio.to_thread(openssh, key_file, fleet.b, "true", port=fleet.port)).returncode == 0

    third = await until(api, await up(api), "ready", "failed")
    assert third["status"] == "failed", third
    assert "no free GPU host" in third["error"], third["error"]
    assert f"{fleet.a} in use" in third["error"] and f"{fleet.down} unreachable" in third["error"]
    # The fleet cannot be forgotten while its hosts are held: only their teardown frees them.
    refused = await api.delete(f"/api/compute/fleets/{fleet_id}")
    assert refused.status_code == 409 and first["id"] in refused.text, refused.text

    for done in (first, second):
        r = await api.post(f"/api/compute/instances/{done['id']}/terminate")
        assert r.status_code == 202, r.text
    for done in (first, second):
        assert (await until(api, done["id"], "terminated", "failed"))["status"] == "terminated"
    # Exactly as before: keys gone (b's own file back to its bytes), k3s gone from a, kept on b
    # (it was there before), no claim left.
    assert {h: snapshot(home) for h, home in fleet.homes.items()} == before
    assert not (fleet.homes[fleet.a] / ".gpuprov").exists() and not (fleet.homes[fleet.a] / ".ssh").exists()
    out = await asyncio.to_thread(openssh, key_file, fleet.a, "true", port=fleet.port)
    assert out.returncode != 0  # the user's key is out
    assert (await api.delete(f"/api/compute/fleets/{fleet_id}")).status_code == 200


BEHIND = "gpu-behind.invalid"  # RFC 6761: never resolves; only the bastion knows where it is


class _Pipe(asyncssh.SSHTCPSession[bytes]):
    """A direct-tcpip channel joined to a TCP connection."""

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


class _Jump(asyncssh.SSHServer):
    """A bastion that lets the fleet's key in and forwards BEHIND to the hidden host's address."""

    def __init__(self, address: str) -> None:
        self.address = address

    def begin_auth(self, username: str) -> bool:
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return username == "jump" and key.public_data == FLEET_KEY.public_data

    def connection_requested(self, dest_host: str, dest_port: int, orig_host: str, orig_port: int) -> Any:
        return self._pipe(dest_port) if dest_host == BEHIND else False

    async def _pipe(self, port: int) -> _Pipe:
        return _Pipe(*await asyncio.open_connection(self.address, port))


async def test_a_host_behind_a_bastion_is_allocated_through_it(
        api: httpx.AsyncClient, fleet: Fleet) -> None:
    # Host b, named only by a name the bastion alone resolves: every SSH step must go through it.
    jump = await asyncssh.listen(fleet.down, 0, server_factory=lambda: _Jump(fleet.b),
                                 server_host_keys=[asyncssh.generate_private_key("ssh-ed25519")])
    try:
        with pytest.raises(OSError):
            await asyncio.open_connection(BEHIND, fleet.port)
        r = await api.post("/api/compute/fleets", json={
            "name": "behind", "port": fleet.port, "private_key": FLEET_KEY.export_private_key().decode(),
            "hosts": [BEHIND], "bastion": {"host": fleet.down, "port": jump.sockets[0].getsockname()[1],
                                           "user": "jump"}})
        assert r.status_code == 201, r.text
        before = snapshot(fleet.homes[fleet.b])
        got = await until(api, await up(api), "ready", "failed")
        assert got["status"] == "ready" and got["ssh"]["host"] == BEHIND, got
        assert [g["name"] for g in got["gpus"]] == ["NVIDIA H100 80GB HBM3"]  # nvidia-smi, via the bastion
        assert (await api.post(f"/api/compute/instances/{got['id']}/terminate")).status_code == 202
        assert (await until(api, got["id"], "terminated", "failed"))["status"] == "terminated"
        assert snapshot(fleet.homes[fleet.b]) == before
    finally:
        jump.close()


async def test_a_job_runs_on_a_free_fleet_host_and_leaves_it_as_it_was(api: httpx.AsyncClient,
                                                                       fleet: Fleet) -> None:
    """`cloud: ssh` on a job: the JobWorkflow's machine is a claimed fleet host, the command runs
    there, the Workload Queue says `local cluster`, and the host is freed back to its snapshot (the
    job's files under ~/.gpuprov go with the claim; its output is in the database)."""
    r = await api.post("/api/compute/fleets", json={
        "name": "rack", "port": fleet.port, "private_key": FLEET_KEY.export_private_key().decode(),
        "hosts": [fleet.a]})
    assert r.status_code == 201, r.text
    before = snapshot(fleet.homes[fleet.a])
    r = await api.post("/api/compute/jobs", json={
        # It waits for the test's word (a file it removes), so the test sees it running there.
        "name": "on-prem", "type": "task", "gpu": "H100",
        "command": "echo ran on $(cat data.txt); while [ ! -e go ]; do sleep 0.1; done; rm go",
        "gpu_count": 2, "cloud": CLOUD, "requested_by": "tests"})
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    ended = ("succeeded", "failed", "cancelled")
    assert (await until(api, job_id, "running", *ended, kind="jobs"))["status"] == "running"
    row = (await api.get(f"/api/compute/workloads/job:{job_id}")).json()
    assert (row["location"], row["status"], row["gpu"]) == ("local cluster", "running", "2× H100"), row
    (fleet.homes[fleet.a] / "go").touch()
    job = await until(api, job_id, *ended, kind="jobs")
    assert job["status"] == "succeeded", job
    logs = (await api.get(f"/api/compute/jobs/{job_id}/logs")).content
    assert logs == b"ran on the host's own files\n"
    assert snapshot(fleet.homes[fleet.a]) == before


async def test_the_sweep_frees_a_claim_whose_allocation_is_unknown_and_no_other(
        api: httpx.AsyncClient, fleet: Fleet, temporal_client: Client, queue: str) -> None:
    r = await api.post("/api/compute/fleets", json={
        "name": "rack", "port": fleet.port, "private_key": FLEET_KEY.export_private_key().decode(),
        "hosts": fleet.hosts})
    assert r.status_code == 201, r.text
    before = snapshot(fleet.homes[fleet.a])
    # A claim of ours no allocation records (a crash between claim and record), and another
    # installation's claim: only ours goes.
    ours = _built(fleet, "fleet002")
    await ours.create(_offer(fleet.a), _spec(attempt_key(f"lost{uuid.uuid4().hex[:8]}", 1), "fleet002"))
    theirs = _built(fleet, "other001")
    kept = await theirs.create(_offer(fleet.b), _spec("theirs-1", "other001"))
    summary = await temporal_client.execute_workflow(
        wf.SWEEP.name, SweepInput(grace_s=0, connection_ids=[r.json()["id"]], poll_interval_s=0.1,
                                    heartbeat_timeout_s=5, list_timeout_s=60, terminate_timeout_s=60,
                                    max_retry_interval_s=1),
        id=f"sweep-fleet-{uuid.uuid4().hex[:8]}", task_queue=queue, result_type=SweepSummary)
    assert [(x.machine.ref.instance_id, x.removed) for x in summary.removed] == [(fleet.a, True)], summary
    assert snapshot(fleet.homes[fleet.a]) == before
    assert await theirs.list_owned() == [kept]


async def test_a_host_whose_claim_vanishes_is_reported_lost_by_the_fleets_watch(
        api: httpx.AsyncClient, fleet: Fleet, temporal_client: Client) -> None:
    r = await api.post("/api/compute/fleets", json={
        "name": "rack", "port": fleet.port, "private_key": FLEET_KEY.export_private_key().decode(),
        "hosts": [fleet.a]})
    assert r.status_code == 201, r.text
    try:
        got = await until(api, await up(api), "ready", "failed")
        assert got["status"] == "ready", got
        shutil.rmtree(fleet.homes[fleet.a] / ".gpuprov" / "claim")  # the host's owner took it back
        lost = await until(api, got["id"], "lost")
        assert "no longer lists machine" in lost["error"], lost
    finally:
        watch = temporal_client.get_workflow_handle(watch_workflow_id(r.json()["id"]))
        await watch.signal(wf.WATCH.stop.name)


def _offer(host: str) -> Offer:
    return Offer(provider=CLOUD, instance_type=host, vcpus=1, memory_gib=1, region="on-prem",
                 price_per_hour=0)


def _spec(key: str, installation: str = "fleet003") -> LaunchSpec:
    return LaunchSpec(key=key, owner=Ownership(installation_id=installation, allocation_id=key),
                      ssh_public_keys=[USER_KEY.export_public_key().decode().strip()])


def _built(fleet: Fleet, installation_id: str) -> SshFleetProvider:
    """The fleet's adapter as a worker builds it, loopback allowed as the fleet tests allow it."""
    adapter = registry.build(CLOUD, fleet.credentials(), installation_id=installation_id)
    assert isinstance(adapter, SshFleetProvider)
    adapter.check_addresses(LOOPBACK)
    return adapter


async def test_a_retried_create_finds_its_claim_and_another_key_is_refused(fleet: Fleet) -> None:
    p = _built(fleet, "fleet003")
    before = snapshot(fleet.homes[fleet.a])
    offers = await p.offers(OfferQuery(gpu="H100"))
    assert [(o.instance_type, o.gpu and o.gpu.count, o.price_per_hour) for o in offers] == [
        (fleet.a, 2, 0), (fleet.b, 1, 0)]
    ref = await p.create(_offer(fleet.a), _spec("alloc-one-1"))
    again = await p.create(_offer(fleet.a), _spec("alloc-one-1"))  # a retry after a lost answer
    assert again == ref and ref.instance_id == fleet.a
    keys = (fleet.homes[fleet.a] / ".ssh" / "authorized_keys").read_text().splitlines()
    assert len(keys) == 1 and keys[0].endswith(" gpuprov-alloc-one-1")  # added once
    with pytest.raises(CapacityError) as refused:
        await p.create(_offer(fleet.a), _spec("alloc-two-1"))
    assert refused.value.scope.instance_type == fleet.a
    assert await p.list_owned() == [ref] and await p.find("alloc-one-1") == ref
    status = await p.get(ref)
    assert status is not None and (status.host, status.ssh_user) == (fleet.a, "ubuntu")
    assert [o.instance_type for o in await p.offers(OfferQuery())] == [fleet.b]
    await p.terminate(ref)
    await p.terminate(ref)  # already free: success
    assert await p.get(ref) is None and await p.list_owned() == []
    assert snapshot(fleet.homes[fleet.a]) == before

    # A host presenting another key than the pinned one is refused before anything runs there.
    pinned = _built(fleet, "fleet003")
    pinned.pin_host_keys({fleet.a: OTHER}, None)
    with pytest.raises(AuthError, match="host key changed"):
        await pinned.create(_offer(fleet.a), _spec("pinned-1"))
    assert snapshot(fleet.homes[fleet.a]) == before

    # Two creates racing for one host: one claim wins, the other is told the host is in use.
    raced = await asyncio.gather(p.create(_offer(fleet.a), _spec("race-one-1")),
                                 p.create(_offer(fleet.a), _spec("race-two-1")), return_exceptions=True)
    [won] = [x for x in raced if not isinstance(x, BaseException)]
    assert [type(x) for x in raced if isinstance(x, BaseException)] == [CapacityError]
    keys = (fleet.homes[fleet.a] / ".ssh" / "authorized_keys").read_text().splitlines()
    assert [k.rsplit(" ", 1)[1] for k in keys] == [f"gpuprov-{won.key}"]
    await p.terminate(won)
    assert snapshot(fleet.homes[fleet.a]) == before
