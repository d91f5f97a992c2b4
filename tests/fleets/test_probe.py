"""The probe end to end: POST /api/compute/fleets starts FleetProbeWorkflow on the session's Temporal
dev server; its activity logs in to real SSH servers (fakeclouds/ssh.py MachineSSH, each on its own
127.x.y.z address with a simulated nvidia-smi in ~/bin), and GET shows each host's answer.

The bastion case, in network namespaces this test makes (as root; torn down even on failure):

    test's namespace ── veth ── netns B: the bastion's sshd ── veth ── netns H: the hidden host's sshd
      10.a.b.1/30                10.a.b.2/30      10.a.b.5/30            10.a.b.6/30

The root namespace routes 10.a.b.4/30 via B, but B does not forward (ip_forward 0): only an SSH
direct-tcpip channel opened by the bastion reaches H, and the test proves a direct connection
fails. The two servers are processes of their own (tests/fleets/netns_ssh.py) inside B and H.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import shutil
import subprocess
import sys
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
from api.deps import AppDeps
from api.temporal import TemporalGateway
from fakeclouds.catalog import Gpu, InstanceType
from fakeclouds.machine_processes import remove_once_unused
from fakeclouds.nvidia_smi import CONTAINER_RUNTIME, script_for
from fakeclouds.ssh import MachineSSH
from messages.fleet import FleetProbeResult
from messages.health import HealthInput, HealthSummary
from messages.ids import fleet_probe_workflow_id, fleet_reprobe_workflow_id
from providers.fleet_addresses import FleetAddresses, parse_networks
from store.models import Fleet
from store.secrets import SecretBox
from tests import netguard, recorded
from tests.api.conftest import TOKEN
from worker import workflow_runner
from workflows.fleet_probe import FleetProbeWorkflow
from workflows.health import HealthWorkflow

REPO = Path(__file__).resolve().parents[2]
# The simulated hosts are on 127.x.y.z: allowed here, as the dev stack allows them
# (GPUPROV_FLEET_ALLOWED_NETWORKS; providers/fleet_addresses.py refuses loopback by default).
LOOPBACK = FleetAddresses(allowed=parse_networks("127.0.0.0/8"))


def gpu_type(name: str, smi_name: str, memory_mib: int, count: int) -> InstanceType:
    return InstanceType(name=name, description="", gpu_description=None, vcpus=1, memory_gib=1, storage_gib=1,
                        gpu=Gpu(name=name, smi_name=smi_name, memory_mib=memory_mib, count=count), prices={})


def make_home(root: Path, name: str, *, gpus: InstanceType | None, docker: bool, sudo: bool) -> Path:
    home = root / name
    (home / "bin").mkdir(parents=True)
    scripts = {"sudo": f"#!/bin/sh\nexit {0 if sudo else 1}\n"}
    if gpus is not None:  # a GPU host with NVIDIA's driver and container toolkit (k3s's GPU runtime)
        scripts["nvidia-smi"] = script_for(gpus, name)
        scripts["nvidia-container-runtime"] = CONTAINER_RUNTIME
    if docker:
        scripts["docker"] = "#!/bin/sh\necho simulated docker\n"
    for script, text in scripts.items():
        (home / "bin" / script).write_text(text)
        (home / "bin" / script).chmod(0o755)
    (home / "data.txt").write_text("the host's own files\n")
    return home


def snapshot(home: Path) -> dict[str, bytes]:
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file()}


@dataclass
class Lab:
    port: int  # every host's sshd port (the fleet has one)
    direct: list[str]  # two reachable hosts, one where nothing listens, one refusing the key
    homes: dict[str, Path]
    root: Path  # a scratch directory for more homes
    servers: dict[str, MachineSSH]  # by address
    host_key: asyncssh.SSHKey  # the hosts' host key


@pytest.fixture
async def lab() -> AsyncIterator[Lab]:
    root = Path(tempfile.mkdtemp(prefix="fl", dir="/tmp"))
    key = FLEET_KEY
    public = key.export_public_key().decode()
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    net = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}"
    a, b, down, wrong = (f"{net}.{i}" for i in (11, 12, 13, 15))
    homes = {
        a: make_home(root, "a", gpus=gpu_type("H100", "NVIDIA H100 80GB HBM3", 81559, 2), docker=True,
                     sudo=True),
        b: make_home(root, "b", gpus=gpu_type("A10", "NVIDIA A10", 23028, 1), docker=False, sudo=False),
    }
    servers = {h: MachineSSH(home=home, host_key=host_key, user="ubuntu", public_keys=[public],
                             env={"PATH": f"{home / 'bin'}:/usr/bin:/bin"}) for h, home in homes.items()}
    port = await servers[a].start(a)
    await servers[b].start(b, port)
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    refusing = MachineSSH(home=root / "wrong", host_key=host_key, user="ubuntu", public_keys=[other])
    await refusing.start(wrong, port)
    servers["wrong"] = refusing
    try:
        yield Lab(port=port, direct=[a, b, down, wrong], homes=homes, root=root, host_key=host_key,
                  servers=servers)
    finally:
        for server in servers.values():
            await server.stop()
        remove_once_unused(root)  # with whatever a test left running on the hosts' shims


FLEET_KEY = asyncssh.generate_private_key("ssh-ed25519")


@dataclass
class Hidden:
    host: str  # the hidden host's address (in netns H, port 22)
    bastion: str  # the bastion's address (in netns B, port 22), user `jump`
    home: Path


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def unmake(tag: str, *namespaces: str) -> None:
    """Delete the namespaces (their links go with them) and the root end of B's link, if left."""
    for ns in namespaces:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30, check=False)
    subprocess.run(["ip", "link", "del", f"gpr{tag}"], capture_output=True, timeout=30, check=False)


async def serve_in(ns: str, address: str, home: Path, user: str,
                   host_key: Path) -> asyncio.subprocess.Process:
    """An SSH server process inside namespace `ns`, once it listens."""
    proc = await asyncio.create_subprocess_exec(
        "ip", "netns", "exec", ns, sys.executable, "-m", "tests.fleets.netns_ssh", "--listen", address,
        "--home", str(home), "--user", user, "--public-key", FLEET_KEY.export_public_key().decode(),
        "--host-key", str(host_key), stdout=asyncio.subprocess.PIPE, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert line == b"ready\n", f"the SSH server in {ns} did not start ({line!r})"
    return proc


@pytest.fixture
async def hidden(lab: Lab) -> AsyncIterator[Hidden]:
    """Namespaces B (bastion) and H (hidden host) as drawn in this module's docstring, unique names
    per run; processes stopped and namespaces (with their links) deleted even when setup fails."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2 (CI runs as root)")
    tag = uuid.uuid4().hex[:6]
    ns_b, ns_h = f"gpfb{tag}", f"gpfh{tag}"
    net = f"10.{random.randint(200, 254)}.{random.randint(0, 255)}"
    procs: list[asyncio.subprocess.Process] = []
    guard = contextlib.ExitStack()
    host_key = lab.root / "host_key"
    lab.host_key.write_private_key(str(host_key))
    (lab.root / "jump").mkdir()
    home = make_home(lab.root, "hidden", gpus=gpu_type("L4", "NVIDIA L4", 23034, 4), docker=True, sudo=True)
    try:
        guard.enter_context(netguard.allowed(f"{net}.0/29"))  # this test's own namespaces
        for ns in (ns_b, ns_h):
            ip("netns", "add", ns)
            ip("-n", ns, "link", "set", "lo", "up")
        ip("link", "add", f"gpr{tag}", "type", "veth", "peer", "name", f"gpb{tag}", "netns", ns_b)
        ip("-n", ns_b, "link", "add", f"gpc{tag}", "type", "veth", "peer", "name", f"gph{tag}", "netns", ns_h)
        for ns, dev, addr in ((None, f"gpr{tag}", f"{net}.1/30"), (ns_b, f"gpb{tag}", f"{net}.2/30"),
                              (ns_b, f"gpc{tag}", f"{net}.5/30"), (ns_h, f"gph{tag}", f"{net}.6/30")):
            where = ("-n", ns) if ns else ()
            ip(*where, "addr", "add", addr, "dev", dev)
            ip(*where, "link", "set", dev, "up")
        # A route to H through B, and H's way back: only B's refusal to forward keeps H hidden.
        ip("route", "add", f"{net}.4/30", "via", f"{net}.2", "dev", f"gpr{tag}")
        ip("-n", ns_h, "route", "add", f"{net}.0/30", "via", f"{net}.5")
        ip("netns", "exec", ns_b, "sysctl", "-qw", "net.ipv4.ip_forward=0")
        procs.append(await serve_in(ns_b, f"{net}.2", lab.root / "jump", "jump", host_key))
        procs.append(await serve_in(ns_h, f"{net}.6", home, "ubuntu", host_key))
        yield Hidden(host=f"{net}.6", bastion=f"{net}.2", home=home)
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 10)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        unmake(tag, ns_h, ns_b)
        guard.close()


class Api(httpx.AsyncClient):
    task_queue: str  # where the test's worker runs the probe (and health) workflows


@pytest.fixture
async def api(engine: sa.Engine, box: SecretBox, temporal_client: Client) -> AsyncIterator[Api]:
    """The real app, its workflow gateway on the session's Temporal, a worker of the probe only."""
    queue = f"fleet-tests-{uuid.uuid4().hex[:8]}"
    gateway = TemporalGateway("unused", "default", queue, keys=[])
    gateway._client = temporal_client
    deps = ActivityDeps(engine=engine, box=box, installation_id="fleet001", client=temporal_client,
                        fleet_addresses=LOOPBACK)
    activities, health = FleetActivities(deps), HealthActivities(deps)
    executor = ThreadPoolExecutor(4)  # the health check's database activities are plain defs
    worker = Worker(temporal_client, task_queue=queue, workflows=[FleetProbeWorkflow, HealthWorkflow],
                    activities=[activities.fleet_hosts, activities.probe_fleet_host, health.health_targets,
                                health.check_connection, health.record_health],
                    activity_executor=executor, workflow_runner=workflow_runner())
    app = create_app(AppDeps(engine=engine, box=box, api_token=TOKEN, installation_id="fleet001",
                             fleet_addresses=LOOPBACK,
                             workflows=gateway))
    async with worker, Api(transport=httpx.ASGITransport(app=app), base_url="http://api",
                           headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        c.task_queue = queue
        yield c
    executor.shutdown(wait=False)


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
        api: Api, lab: Lab, hidden: Hidden, temporal_client: Client, engine: sa.Engine,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    pem = FLEET_KEY.export_private_key().decode()
    secret_lines = [line for line in pem.splitlines() if line and not line.startswith("-----")]
    r = await api.post("/api/compute/fleets", json={"name": "rack", "port": lab.port, "private_key": pem,
                                                    "hosts": lab.direct})
    assert r.status_code == 201, r.text
    direct = r.json()
    # The hidden host: no direct way to it. B drops what it would have to forward (silently: this
    # times out, an OSError; with ip_forward=1 in B the same connection succeeds).
    with pytest.raises(OSError):
        await asyncio.wait_for(asyncio.open_connection(hidden.host, 22), 3)
    r = await api.post("/api/compute/fleets", json={
        "name": "behind", "private_key": pem, "hosts": [hidden.host],
        "bastion": {"host": hidden.bastion, "user": "jump"}})
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
    got = (await api.get(f"/api/compute/fleets/{behind['id']}")).json()
    [host] = got["hosts"]
    assert host["reachable"] is True and host["gpu_summary"] == "4× L4 (22GB) · 88GB total", host
    pinned = lab.host_key.get_fingerprint("sha256")
    assert host["host_key_fingerprint"] == got["bastion"]["host_key_fingerprint"] == pinned

    # The key: in no answer, no log line, no workflow history (decoded by the codec, so in clear).
    listed = (await api.get("/api/compute/fleets")).text
    texts = [listed, caplog.text]
    for fleet in (direct, behind):
        handle = temporal_client.get_workflow_handle(probe_workflow_id(engine, fleet["id"]))
        history = await handle.fetch_history()
        texts.append(history.to_json())
    for text in texts:
        assert not any(line in text for line in secret_lines)

    # DELETE (from the providers list, or the fleets route) touches no host: their files are as they
    # were, nothing ran there.
    homes = [*lab.homes.values(), hidden.home]
    before = [snapshot(home) for home in homes]
    assert (await api.delete(f"/api/compute/providers/{direct['id']}")).json()["status"] == "removed"
    assert (await api.delete(f"/api/compute/fleets/{behind['id']}")).status_code == 200
    assert [snapshot(home) for home in homes] == before
    assert (await api.get("/api/compute/providers")).json()["items"] == []


async def health_run(client: Client, api: Api, fleet_id: str, *, keep: bool = False) -> HealthSummary:
    """What the `gpuprov-health` Schedule starts every interval, run now for this fleet only. `keep`:
    its history and its re-probe child's replayed, and kept when recording (tests/recorded.py)."""
    queue = api.task_queue
    handle = await client.start_workflow(
        HealthWorkflow.run, HealthInput(connection_ids=[], fleet_ids=[fleet_id]),
        id=f"health-test-{uuid.uuid4().hex[:8]}", task_queue=queue)
    summary = await handle.result()
    if keep:
        await recorded.replays(client, handle.id,
                               fleet_reprobe_workflow_id(fleet_id, handle.result_run_id or ""))
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
    await recorded.replays(temporal_client, probe_workflow_id(engine, fleet["id"]))  # one host down
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
        summary = await health_run(temporal_client, api, fleet["id"], keep=True)
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
