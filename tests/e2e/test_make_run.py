"""What a user gets from `make run`, end to end with real processes, on ONE `gpuprov dev` run (and one
restart; the run is tests/devstack.py's, which the console's browser tests used first): each start
costs the suite a Temporal dev server, the simulation, a worker, the API and
twelve ConnectWorkflows, so the checks below share it, in this file's order.

1. `gpuprov dev` starts every child on free ports and connects every simulated cloud through the
   real ConnectWorkflow — here with a cloud from outside gpuprov installed too (tests/plugin_cloud:
   an adapter and a facade on PYTHONPATH, nothing else), which is served, connected, listed by the
   CLI and offered. Its home is its user's only and no process shows a secret on its command line.
2. Every GPU cloud allocates over HTTP; the real OpenSSH client logs in with the user's key at the
   address and port each cloud reports; after terminate the simulated clouds hold nothing of ours —
   no machine, no per-VM side resource.
3. The user's flow: `gpuprov up`, OpenSSH into the machine, `ls`, `offers`, a Lambda machine on port
   22 at its own address, the security audit; SIGINT stops everything; a restart keeps state (same
   token, connections not made twice, the machine still answers) and makes a home left readable
   private; `down` until the cloud shows the machine gone.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from api.serve import process_alive
from cli import dev_docker
from cli.dev import TOKENS_FILE, connection_bodies
from fakeclouds import clouds
from providers import docker_engine
from providers.docker_ import LABEL_ALLOCATION, DockerProvider
from tests import audit, kube
from tests.devrun import DevRun, assert_private, process_tree
from tests.devstack import SharedDev
from tests.eventually import eventually_sync
from tests.test_new_cloud import plugin_env

SSH = shutil.which("ssh")
PLUGIN_CLOUD = "democloud"  # tests/plugin_cloud's cloud
GPU_CLOUDS = ("lambda", "runpod", "vastai", "hyperstack", "massedcompute", "digitalocean", "verda",
              "primeintellect", "nebius", "modal", "oci")
OWNED_NAME = re.compile(r"gpuprov-[a-z0-9]{8}-(.+)")
SSH_LINE = re.compile(r"ssh (?:-p (\d+) )?(\w+)@(127\.[\d.]+)")


def openssh(private: Path, port: int, user: str, command: str,
            host: str = "127.0.0.1") -> subprocess.CompletedProcess[str]:
    assert SSH, "the OpenSSH client is required (Debian package openssh-client)"
    return subprocess.run(
        [SSH, "-i", str(private), "-p", str(port), "-o", "StrictHostKeyChecking=no",
         "-o", "UserKnownHostsFile=/dev/null", "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
         "-o", "LogLevel=ERROR", f"{user}@{host}", command],
        capture_output=True, text=True, timeout=30)


@dataclass
class Running:
    """The module's `gpuprov dev`: where it listens, its token, and a CLI environment for it."""

    run: DevRun
    home: Path
    ports: dict[str, int]
    token: str
    private: Path  # the user's SSH key
    public: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports['GPUPROV_API_PORT']}"

    def api(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=30)

    def cli_env(self) -> dict[str, str]:
        """The CLI as the user runs it, with the plugin cloud installed (as for the run)."""
        return {**plugin_env(), "GPUPROV_TOKEN": self.token, "GPUPROV_API_URL": self.url,
                "GPUPROV_POLL_INTERVAL": "0.2"}

    def gpuprov(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cli", *args], env=self.cli_env(), capture_output=True,
                              text=True, timeout=timeout)


@pytest.fixture(scope="module")
def dev(shared_dev: SharedDev) -> Running:
    """The suite's shared `gpuprov dev` (tests/devstack.py: the console's browser tests used it
    first and removed what they made). This file's last test stops it and restarts it."""
    assert shared_dev.alive(), "the shared gpuprov dev stopped before the make-run checks"
    return Running(shared_dev.run, shared_dev.home, shared_dev.ports, shared_dev.token, shared_dev.private,
                   shared_dev.public)


def test_every_child_up_every_cloud_connected_home_private(dev: Running) -> None:
    assert len(dev.run.child_pids()) == 4  # temporal, localcloud, worker, api
    token_file = dev.home / "api-token"
    assert token_file.read_text().strip() == dev.token and (token_file.stat().st_mode & 0o777) == 0o600
    with dev.api() as api:
        assert api.get("/openapi.json").status_code == 200
        assert httpx.get(f"{dev.url}/api/compute/connections").status_code == 401
        conns = api.get("/api/compute/connections", params={"limit": 200}).json()["items"]
    shown = {c["provider"]: (c["name"], c["status"]) for c in conns}
    # one connection each: the simulated clouds, the plugin's, and Docker (a real engine: cli/dev_docker.py)
    assert len(conns) == len(shown) == len(clouds.simulated()) + 2
    assert shown[DockerProvider.id] == ("Docker", "connected")
    assert {cloud: shown.get(cloud) for cloud in clouds.simulated()} == {
        cloud: (clouds.facade(cloud).display_name, "connected") for cloud in clouds.simulated()}
    # Every child has written its state (the worker ran ConnectWorkflow, each cloud verified the
    # tokens it read from cloud-tokens.json): all of it private, no secret in any argv.
    assert_private(dev.run, dev.home)


def test_a_cloud_from_outside_gpuprov_is_served_connected_listed_and_offered(dev: Running) -> None:
    with dev.api() as api:
        conns = api.get("/api/compute/connections", params={"limit": 200}).json()["items"]
    assert {c["provider"]: c["status"] for c in conns}.get(PLUGIN_CLOUD) == "connected", conns
    listed = dev.gpuprov("clouds", timeout=60)
    assert listed.returncode == 0 and PLUGIN_CLOUD in listed.stdout, listed.stdout + listed.stderr
    offers = dev.gpuprov("offers", "--cloud", PLUGIN_CLOUD, timeout=60)
    assert offers.returncode == 0 and "demo-l4" in offers.stdout, offers.stdout + offers.stderr


def settle(api: httpx.Client, ids: dict[str, str], done: set[str], deadline_s: float = 240) -> dict[str, Any]:
    """Poll each instance until its status is in `done`; their last details."""
    last: dict[str, Any] = {}
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        last = {cloud: api.get(f"/api/compute/instances/{i}").json() for cloud, i in ids.items()}
        if all(d["status"] in done for d in last.values()):
            return last
        time.sleep(0.5)
    raise AssertionError({c: (d["status"], d.get("error")) for c, d in last.items()})


def test_every_gpu_cloud_allocates_logs_in_and_leaves_nothing(dev: Running) -> None:
    assert set(GPU_CLOUDS) <= set(clouds.simulated())
    offers = dev.gpuprov("offers", "--gpu", "A100")
    assert offers.returncode == 0, offers.stdout + offers.stderr
    clouds_shown = {line.split()[0] for line in offers.stdout.splitlines()[1:] if line.strip()}
    assert len(clouds_shown & set(GPU_CLOUDS)) >= 3, offers.stdout  # one list, several clouds
    assert "answered" in offers.stderr or "offers" in offers.stderr, offers.stderr

    key = dev.public.read_text().strip()
    with dev.api() as api:
        ids = {}
        for cloud in GPU_CLOUDS:
            body = {"cloud": cloud, "k3s": False, "ssh_public_keys": [key]}
            r = api.post("/api/compute/instances", json=body)
            assert r.status_code == 202, (cloud, r.text)
            ids[cloud] = r.json()["id"]
        ready = settle(api, ids, {"ready", "failed"})
        assert {c: d["status"] for c, d in ready.items()} == dict.fromkeys(GPU_CLOUDS, "ready"), \
            {c: d.get("error") for c, d in ready.items()}
        for cloud, detail in ready.items():
            ssh = detail["ssh"]
            login = openssh(dev.private, ssh["port"], ssh["user"], "echo in as $USER", host=ssh["host"])
            assert login.returncode == 0 and login.stdout.strip() == f"in as {ssh['user']}", (cloud, login)

        for i in ids.values():
            assert api.post(f"/api/compute/instances/{i}/terminate").status_code == 202
        settle(api, ids, {"terminated"})

    admin = f"http://127.0.0.1:{dev.ports['GPUPROV_LOCALCLOUD_PORT']}/_fake"
    machines = [m for m in httpx.get(f"{admin}/machines").json()["machines"] if m["facade"] in GPU_CLOUDS]
    assert {m["facade"] for m in machines} == set(GPU_CLOUDS)
    assert [m for m in machines if m["status"] != "terminated"] == []
    keys = {m_.group(1) for m in machines if (m_ := OWNED_NAME.fullmatch(m.get("name") or ""))}
    left = [row for row in httpx.get(f"{admin}/side-resources").json()["side_resources"]
            if row["facade"] in GPU_CLOUDS and any(k in str(row.get("name")) for k in keys)]
    assert left == [], left


def test_docker_up_logs_in_with_openssh_and_down_leaves_nothing(dev: Running) -> None:
    """The issue's check: `gpuprov up` on Docker (a real engine: podman's where no Docker runs) is
    ready, OpenSSH logs in as ubuntu with the user's key on 127.0.0.1, `gpuprov down` leaves nothing."""
    up = dev.gpuprov("up", "--cloud", DockerProvider.id, "--ssh-key", str(dev.public))
    assert up.returncode == 0, up.stdout + up.stderr
    accepted = re.search(r"allocation (\S+) accepted", up.stdout)
    m = re.search(r"ssh -p (\d+) (\w+)@127\.0\.0\.1", up.stdout)
    assert accepted and m, up.stdout
    assert "k3s skipped" in up.stdout, up.stdout
    login = openssh(dev.private, int(m.group(1)), m.group(2), "echo in as $USER")
    assert login.returncode == 0 and login.stdout.strip() == "in as ubuntu", login

    engine = (docker_engine.existing_engine()
              or docker_engine.PodmanService(dev_docker.engine_home(dev.home)).base_url)
    import docker

    client = docker.DockerClient(base_url=engine, version="1.41", timeout=30)
    mine = {"label": f"{LABEL_ALLOCATION}={accepted.group(1)}"}
    [ours] = client.containers.list(all=True, filters=mine)
    assert [b["HostIp"] for b in ours.attrs["HostConfig"]["PortBindings"]["22/tcp"]] == ["127.0.0.1"]
    down = dev.gpuprov("down", accepted.group(1))
    assert down.returncode == 0 and "terminated" in down.stdout, down.stdout + down.stderr
    assert client.containers.list(all=True, filters=mine) == []


def test_wrong_credentials_for_the_grpc_clouds_are_refused_with_the_reason_and_nothing_saved(
        dev: Running) -> None:
    """Through the real ConnectWorkflow, at the simulation's endpoint as `make run` connects it:
    Nebius with a key its service account never registered (the SDK signs its JWT with it), Modal
    with a wrong token secret — 400 with the cloud's reason, never the secret, nothing stored."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    wrong_secret = "as-wrong-as-can-be"
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    tokens = json.loads((dev.home / TOKENS_FILE).read_text())
    ca_pem = (dev.home / "localcloud" / "tls" / "ca.pem").read_text()  # what `make run` hands Nebius
    bodies = connection_bodies(f"http://127.0.0.1:{dev.ports['GPUPROV_LOCALCLOUD_PORT']}",
                               {c: tokens[c] for c in ("nebius", "modal", "oci")}, ca_pem=ca_pem,
                               grpc_url=f"http://127.0.0.1:{dev.ports['GPUPROV_LOCALCLOUD_GRPC_PORT']}",
                               grpc_tls_url=f"https://127.0.0.1:{dev.ports['GPUPROV_LOCALCLOUD_GRPC_TLS_PORT']}")
    bodies["nebius"]["credentials"]["private_key"] = other_key
    bodies["modal"]["credentials"]["token_secret"] = wrong_secret
    bodies["oci"]["credentials"]["private_key"] = other_key  # OCI: the SDK signs every request with it
    reasons = {"nebius": "signature does not match the public key", "modal": "token id or secret is invalid",
               "oci": "does not verify with the registered api key"}
    with dev.api() as api:
        before = api.get("/api/compute/connections").json()
        for cloud, body in bodies.items():
            r = api.post("/api/compute/connections", json={**body, "name": f"wrong {cloud}"})
            assert r.status_code == 400, (cloud, r.text)
            assert reasons[cloud] in r.json()["detail"].lower(), (cloud, r.text)
            assert wrong_secret not in r.text and "PRIVATE KEY" not in r.text
        assert api.get("/api/compute/connections").json() == before


def test_acceptance_run_on_a_simulated_cloud_passes_every_step_and_reads_simulated(dev: Running) -> None:
    """`gpuprov acceptance run` as an operator runs it beside the stack: the run through the API, the
    plan approved by --yes, its own private worker (settings from $GPUPROV_HOME/worker.env) SIGKILLed
    mid-create and restarted; every step passes and the cloud then reads `simulated`."""
    with dev.api() as api:
        conns = api.get("/api/compute/connections", params={"limit": 200}).json()["items"]
    conn = next(c["id"] for c in conns if c["provider"] == "lambda")
    r = subprocess.run([sys.executable, "-m", "cli", "acceptance", "run", "--connection", conn, "--yes",
                        "--max-minutes", "5"], env={**dev.cli_env(), "GPUPROV_HOME": str(dev.home)},
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "on a simulated account" in r.stdout and "SIGKILLed the private worker" in r.stdout, r.stdout
    for step in ("allocate", "nothing_billable", "interrupt_after_create", "interrupt_while_booting",
                 "interrupt_worker_killed"):
        assert f"  {step}: passed" in r.stdout, r.stdout
    assert "acceptance passed: lambda" in r.stdout
    with dev.api() as api:
        lam = next(c for c in api.get("/api/compute/clouds", params={"limit": 200}).json()["items"]
                   if c["id"] == "lambda")
        runs = api.get("/api/compute/acceptance-runs").json()["items"]
    assert lam["support"]["status"] == "simulated", lam["support"]
    assert [run["outcome"] for run in runs] == ["passed"] and runs[0]["leftovers"] == []


def _allocated(up: subprocess.CompletedProcess[str]) -> str:
    accepted = re.search(r"allocation (\S+) accepted", up.stdout)
    assert up.returncode == 0 and accepted, up.stdout + up.stderr
    return accepted.group(1)


def _ssh_children(pid: int) -> list[int]:
    return [p for p in process_tree(pid) if Path(f"/proc/{p}/comm").read_text().strip() == "ssh"]


def test_kubernetes_api_direct_on_lambda_tunnel_on_verda_none_on_runpod_and_docker(
        dev: Running, tmp_path: Path) -> None:
    """The issue's checks: after `gpuprov up --cloud lambda --gpu A10` (k3s on), `gpuprov kubeconfig`
    lets the official client list one Ready node with nvidia.com/gpu 1 at the machine's address (TLS
    verified); the same on Verda through `gpuprov tunnel`, which comes back after its link drops; the
    credential is in no log, database or workflow history; RunPod and Docker refuse with their reason."""
    lam = _allocated(dev.gpuprov("up", "--cloud", "lambda", "--gpu", "A10", "--ssh-key", str(dev.public)))
    direct = tmp_path / "lambda.yaml"
    got = dev.gpuprov("kubeconfig", lam, "-o", str(direct))
    assert got.returncode == 0 and "(direct, https://127." in got.stderr, got.stdout + got.stderr
    assert direct.stat().st_mode & 0o777 == 0o600
    nodes = kube.list_nodes(direct.read_text())
    assert len(nodes) == 1 and kube.ready(nodes[0]) and kube.gpus_of(nodes[0]) == "1"

    ver = _allocated(dev.gpuprov("up", "--cloud", "verda", "--gpu", "V100", "--ssh-key", str(dev.public)))
    tunneled = tmp_path / "verda.yaml"
    tunnel = subprocess.Popen([sys.executable, "-m", "cli", "tunnel", ver, "-o", str(tunneled),
                               "-i", str(dev.private)], env=dev.cli_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    printed: list[str] = []
    reader = threading.Thread(target=lambda: printed.extend(tunnel.stdout or []), daemon=True)
    reader.start()

    def says(text: str, times: int = 1) -> bool:
        return sum(text in line for line in list(printed)) >= times

    try:
        eventually_sync(lambda: says("tunnel up"), within=60, what="the tunnel up",
                        detail=lambda: "".join(printed))
        nodes = kube.list_nodes(tunneled.read_text())
        assert len(nodes) == 1 and kube.ready(nodes[0]) and kube.gpus_of(nodes[0]) == "1"
        for pid in _ssh_children(tunnel.pid):  # the link drops
            os.kill(pid, signal.SIGKILL)
        eventually_sync(lambda: says("tunnel down") and says("tunnel up", 2), within=60,
                        what="the tunnel back up", detail=lambda: "".join(printed))
        assert kube.list_nodes(tunneled.read_text())[0].metadata.name == nodes[0].metadata.name
    except BaseException:
        tunnel.kill()
        raise
    tunnel.send_signal(signal.SIGINT)  # as Ctrl-C in the user's terminal
    assert tunnel.wait(30) == 0, printed
    reader.join(10)
    assert says("tunnel closed"), printed

    with dev.api() as api:
        rows = api.get("/api/compute/instances", params={"limit": 200}).json()["items"]
        fetches = api.get(f"/api/compute/instances/{lam}/kubeconfig-fetches").json()
    assert [f["principal"] for f in fetches] == ["admin"] and fetches[0]["access"] == "direct"
    for cloud in ("runpod", DockerProvider.id):  # instances earlier tests in this file made
        other = next(r["id"] for r in rows if r["cloud"] == cloud)
        for command in ("kubeconfig", "tunnel"):
            refused = dev.gpuprov(command, other)
            assert refused.returncode != 0 and "has no Kubernetes API access" in refused.stderr, refused

    # The cluster-admin key is nowhere at rest but on the machine itself (the simulated machines'
    # disks are under localcloud/machines): not in the database, Temporal's, any log, or the output.
    cfg = yaml.safe_load(direct.read_text())
    pem = base64.b64decode(cfg["users"][0]["user"]["client-key-data"]).decode()
    needles = [cfg["users"][0]["user"]["client-key-data"].encode(), pem.splitlines()[1].encode()]
    machines = dev.home / "localcloud" / "machines"
    for path in dev.home.rglob("*"):
        if path.is_file() and machines not in path.parents:
            data = path.read_bytes()
            assert not any(n in data for n in needles), f"the kubeconfig's key is in {path}"
    assert not any(n.decode() in "\n".join(dev.run.lines) for n in needles)

    for iid in (lam, ver):
        down = dev.gpuprov("down", iid)
        assert down.returncode == 0, down.stdout + down.stderr


def test_up_ssh_ls_offers_then_stop_restart_down(dev: Running) -> None:
    """Last in this file: it stops the module's run and starts it again on the same home."""
    up = dev.gpuprov("up", "--cloud", "local", "--no-k3s", "--ssh-key", str(dev.public))
    assert up.returncode == 0, up.stdout + up.stderr
    for phase in ("plan", "create", "ssh", "gpu_check", "ready"):
        assert phase in up.stdout, up.stdout  # phases were streamed
    accepted = re.search(r"allocation (\S+) accepted", up.stdout)
    m = re.search(r"ssh -p (\d+) (\w+)@127\.0\.0\.1", up.stdout)
    assert accepted and m, up.stdout
    instance_id, port, user = accepted.group(1), int(m.group(1)), m.group(2)
    login = openssh(dev.private, port, user, "echo hello from $USER; pwd")
    assert login.returncode == 0, login.stderr
    assert login.stdout.startswith(f"hello from {user}\n")

    ls = dev.gpuprov("ls")
    assert ls.returncode == 0 and instance_id in ls.stdout, ls.stdout
    assert re.search(rf"{instance_id}.*local.*ready|{instance_id}.*ready.*local", ls.stdout), ls.stdout

    offers = dev.gpuprov("offers", "--cloud", "lambda")
    assert offers.returncode == 0, offers.stderr
    assert "gpu_1x_a10" in offers.stdout and "A10" in offers.stdout, offers.stdout

    # A Lambda machine (simulated): SSH on port 22 at its own address, as on real Lambda; the
    # user's key reaches it through cloud-init.
    up_l = dev.gpuprov("up", "--cloud", "lambda", "--gpu", "A10", "--no-k3s", "--ssh-key", str(dev.public))
    assert up_l.returncode == 0, up_l.stdout + up_l.stderr
    ml = SSH_LINE.search(up_l.stdout)
    assert ml and ml.group(1) is None and ml.group(3) != "127.0.0.1", up_l.stdout  # port 22: no -p
    gpus = openssh(dev.private, 22, ml.group(2), "nvidia-smi -L", host=ml.group(3))
    assert gpus.returncode == 0 and "A10" in gpus.stdout, gpus.stdout + gpus.stderr
    # Machines' disks, host keys and cloud-init logs now exist too: all private.
    assert_private(dev.run, dev.home)
    # The security audit's reproductions (tests/audit.py), against this running `make run`; last
    # before the restart, as it makes instances, connections and projects of its own.
    assert [f"{c.name}: {c.seen}" for c in audit.run(dev.url, dev.token, dev.home) if not c.ok] == []

    pids = dev.run.child_pids()
    code = dev.run.interrupt()
    assert code == 0, "\n".join(dev.run.lines)
    assert "stopped" in dev.run.lines
    assert [p for p in pids if process_alive(p)] == []

    # A home an older gpuprov left readable by others is made private on the next start.
    dev.home.chmod(0o755)
    (dev.home / "logs" / "api.log").chmod(0o644)
    # Everything stopped; state survives: same token, connections not made twice, same instance,
    # still ready, machine still answers.
    again = DevRun(dev.home, dev.ports, extra_env={"PYTHONPATH": plugin_env()["PYTHONPATH"]})
    try:
        assert again.wait_for(r"API token\s+(\S+)").group(1) == dev.token
        assert [line for line in again.lines if "private" in line] == [
            f"gpuprov: made {dev.home} private (mode 700, was 755); its files are owner-only now"]
        assert_private(again, dev.home)
        with dev.api() as api:
            conns = api.get("/api/compute/connections", params={"limit": 200}).json()["items"]
        assert len(conns) == len(clouds.simulated()) + 2  # the plugin cloud's and Docker's too; none twice
        assert not any("connected " in line for line in again.lines)
        ls = dev.gpuprov("ls")
        assert instance_id in ls.stdout and "ready" in ls.stdout, ls.stdout
        assert openssh(dev.private, port, user, "true").returncode == 0

        down = dev.gpuprov("down", instance_id)
        assert down.returncode == 0 and "terminated" in down.stdout, down.stdout + down.stderr
        gone = openssh(dev.private, port, user, "true")
        assert gone.returncode != 0  # the machine is gone, not just marked so
        with dev.api() as api:
            assert api.get(f"/api/compute/instances/{instance_id}").json()["status"] == "terminated"
    finally:
        assert again.interrupt() == 0, "\n".join(again.lines)
