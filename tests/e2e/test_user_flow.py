"""The flow a user follows after `make run`, end to end with real processes: `gpuprov dev` starts
every child on free ports and connects the simulated clouds through the real ConnectWorkflow;
`gpuprov up`, the real OpenSSH client logging into the new machine with the user's key, `ls`,
`offers`; SIGINT stops everything; a restart keeps state (same token, connections not made twice,
the machine still answers) and makes a home left readable private; `down` until the cloud shows
the machine gone. Its home is its user's only and no process shows a secret on its command line.

One `gpuprov dev` run and one restart cover all of it: each start costs the suite a Temporal dev
server, the simulation, a worker and the API (tests/cli/test_dev.py was the same start and restart)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import asyncssh
import httpx

from fakeclouds import clouds
from tests import audit
from tests.devrun import DevRun, alive, assert_private, dev_ports

SSH = shutil.which("ssh")


def user_key(tmp: Path) -> tuple[Path, Path]:
    key = asyncssh.generate_private_key("ssh-ed25519", comment="user@test")
    private = tmp / "id_ed25519"
    private.write_bytes(key.export_private_key())
    private.chmod(0o600)
    public = tmp / "id_ed25519.pub"
    public.write_bytes(key.export_public_key())
    return private, public


def gpuprov(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


SSH_LINE = re.compile(r"ssh (?:-p (\d+) )?(\w+)@(127\.[\d.]+)")


def openssh(private: Path, port: int, user: str, command: str,
            host: str = "127.0.0.1") -> subprocess.CompletedProcess[str]:
    assert SSH, "the OpenSSH client is required (Debian package openssh-client)"
    return subprocess.run(
        [SSH, "-i", str(private), "-p", str(port), "-o", "StrictHostKeyChecking=no",
         "-o", "UserKnownHostsFile=/dev/null", "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
         "-o", "LogLevel=ERROR", f"{user}@{host}", command],
        capture_output=True, text=True, timeout=30)


def test_dev_up_ssh_ls_offers_stop_restart_down(tmp_path: Path, processes: None) -> None:
    home, ports = tmp_path / "home", dev_ports()
    private, public = user_key(tmp_path)
    api = f"http://127.0.0.1:{ports['GPUPROV_API_PORT']}"
    run = DevRun(home, ports)
    try:
        token = run.wait_for(r"API token\s+(\S+)").group(1)
        pids = run.child_pids()
        assert len(pids) == 4  # temporal, localcloud, worker, api
        token_file = home / "api-token"
        assert token_file.read_text().strip() == token and (token_file.stat().st_mode & 0o777) == 0o600
        headers = {"Authorization": f"Bearer {token}"}
        assert httpx.get(f"{api}/openapi.json", headers=headers).status_code == 200
        assert httpx.get(f"{api}/api/compute/connections").status_code == 401
        conns = httpx.get(f"{api}/api/compute/connections", headers=headers).json()["items"]
        assert sorted((c["provider"], c["name"], c["status"]) for c in conns) == sorted(
            (cloud, clouds.facade(cloud).display_name, "connected") for cloud in clouds.simulated())
        # Every child has written its state (the worker ran ConnectWorkflow, each cloud verified the
        # tokens it read from cloud-tokens.json): all of it private, no secret in any argv.
        assert_private(run, home)

        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPROV_")}
        env.update(GPUPROV_TOKEN=token, GPUPROV_API_URL=f"http://127.0.0.1:{ports['GPUPROV_API_PORT']}",
                   GPUPROV_POLL_INTERVAL="0.2")

        up = gpuprov(env, "up", "--cloud", "local", "--no-k3s", "--ssh-key", str(public))
        assert up.returncode == 0, up.stdout + up.stderr
        for phase in ("plan", "create", "ssh", "gpu_check", "ready"):
            assert phase in up.stdout, up.stdout  # phases were streamed
        m = re.search(r"ssh -p (\d+) (\w+)@127\.0\.0\.1", up.stdout)
        assert m, up.stdout
        port, user = int(m.group(1)), m.group(2)
        login = openssh(private, port, user, "echo hello from $USER; pwd")
        assert login.returncode == 0, login.stderr
        assert login.stdout.startswith(f"hello from {user}\n")

        ls = gpuprov(env, "ls")
        assert ls.returncode == 0 and "ready" in ls.stdout and "local" in ls.stdout, ls.stdout
        instance_id = httpx.get(f"{env['GPUPROV_API_URL']}/api/compute/instances",
                                headers={"Authorization": f"Bearer {token}"}).json()["items"][0]["id"]

        offers = gpuprov(env, "offers", "--cloud", "lambda")
        assert offers.returncode == 0, offers.stderr
        assert "gpu_1x_a10" in offers.stdout and "A10" in offers.stdout, offers.stdout

        # A Lambda machine (simulated): SSH on port 22 at its own address, as on real Lambda; the
        # user's key reaches it through cloud-init.
        up_l = gpuprov(env, "up", "--cloud", "lambda", "--gpu", "A10", "--no-k3s", "--ssh-key", str(public))
        assert up_l.returncode == 0, up_l.stdout + up_l.stderr
        ml = SSH_LINE.search(up_l.stdout)
        assert ml and ml.group(1) is None and ml.group(3) != "127.0.0.1", up_l.stdout  # port 22: no -p
        gpus = openssh(private, 22, ml.group(2), "nvidia-smi -L", host=ml.group(3))
        assert gpus.returncode == 0 and "A10" in gpus.stdout, gpus.stdout + gpus.stderr
        # Two machines' disks, host keys and cloud-init logs now exist too: all private.
        assert_private(run, home)
        # The security audit's reproductions (tests/audit.py), against this running `make run`; last,
        # as it makes instances, connections and projects of its own.
        assert [f"{c.name}: {c.seen}" for c in audit.run(api, token, home) if not c.ok] == []
    finally:
        code = run.interrupt()
    assert code == 0, "\n".join(run.lines)
    assert "stopped" in run.lines
    assert [p for p in pids if alive(p)] == []

    # A home an older gpuprov left readable by others is made private on the next start.
    home.chmod(0o755)
    (home / "logs" / "api.log").chmod(0o644)
    # Everything stopped; state survives: same token, connections not made twice, same instance,
    # still ready, machine still answers.
    again = DevRun(home, ports)
    try:
        assert again.wait_for(r"API token\s+(\S+)").group(1) == token
        assert [line for line in again.lines if "private" in line] == [
            f"gpuprov: made {home} private (mode 700, was 755); its files are owner-only now"]
        assert_private(again, home)
        conns = httpx.get(f"{api}/api/compute/connections", headers=headers).json()["items"]
        assert len(conns) == len(clouds.simulated())
        assert not any("connected " in line for line in again.lines)
        ls = gpuprov(env, "ls")
        assert instance_id in ls.stdout and "ready" in ls.stdout, ls.stdout
        assert openssh(private, port, user, "true").returncode == 0

        down = gpuprov(env, "down", instance_id)
        assert down.returncode == 0 and "terminated" in down.stdout, down.stdout + down.stderr
        gone = openssh(private, port, user, "true")
        assert gone.returncode != 0  # the machine is gone, not just marked so
        detail = httpx.get(f"{env['GPUPROV_API_URL']}/api/compute/instances/{instance_id}",
                           headers={"Authorization": f"Bearer {token}"}).json()
        assert detail["status"] == "terminated"
    finally:
        assert again.interrupt() == 0, "\n".join(again.lines)
