"""The flow a user follows after `make run`, end to end with real processes: `gpuprov dev`,
`gpuprov up`, the real OpenSSH client logging into the new machine with the user's key, `ls`,
`offers`, a restart of everything, and `down` until the cloud shows the machine gone."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import asyncssh
import httpx
import pytest

from tests.devrun import DevRun, assert_private, dev_ports

pytestmark = pytest.mark.slow

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


def test_up_ssh_ls_offers_restart_down(tmp_path: Path) -> None:
    home, ports = tmp_path / "home", dev_ports()
    private, public = user_key(tmp_path)
    run = DevRun(home, ports)
    try:
        token = run.wait_for(r"API token\s+(\S+)").group(1)
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
    finally:
        assert run.interrupt() == 0, "\n".join(run.lines)

    # Everything stopped; state survives: same instance, still ready, machine still answers.
    again = DevRun(home, ports)
    try:
        again.wait_for(r"API token\s+(\S+)")
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
