from __future__ import annotations

import asyncio
import ipaddress
import os
from pathlib import Path

import asyncssh
import httpx
import pytest

from api.serve import process_alive
from fakeclouds.admin import FakeCloudAdmin
from fakeclouds.machine_processes import tmp_of
from tests.eventually import eventually
from tests.fakeclouds.helpers import WITHIN, create_local, launch_lambda, wait_lambda, wait_local


async def _local_machine(local: httpx.AsyncClient, pubkey: str) -> dict:
    m = (await create_local(local, pubkey)).json()
    return await wait_local(local, m["id"])


def _connect(port: int, key: asyncssh.SSHKey, user: str = "gpuprov",
             host: str = "127.0.0.1") -> asyncssh.connect:
    return asyncssh.connect(host, port, username=user, client_keys=[key], known_hosts=None,
                            agent_path=None, connect_timeout=5)


def _lambda_ssh(inst: dict, key: asyncssh.SSHKey, user: str = "ubuntu") -> asyncssh.connect:
    """Like a Lambda client: the instance's ip, port 22 (the API has no port field)."""
    return _connect(22, key, user, host=inst["ip"])


async def test_exec_runs_bash_in_machine_home(local: httpx.AsyncClient, admin: FakeCloudAdmin,
                                              ssh_key: asyncssh.SSHKey, pubkey: str) -> None:
    m = await _local_machine(local, pubkey)
    home = admin.machine(m["id"])["home"]
    async with _connect(m["ssh_port"], ssh_key) as conn:
        r = await conn.run('echo "$USER $HOME"; pwd; echo err >&2; exit 7')
        assert r.exit_status == 7
        assert r.stdout == f"gpuprov {home}\n{home}\n" and r.stderr == "err\n"
        r = await conn.run("tr a-z A-Z", input="piped in\n")
        assert r.stdout == "PIPED IN\n" and r.exit_status == 0
        assert (await conn.run("echo data > f.txt")).exit_status == 0
        async with conn.start_sftp_client() as sftp:
            async with sftp.open("f.txt") as f:
                assert await f.read() == "data\n"
        # honest CPU machine: no simulated nvidia-smi; our image ships no k3s
        assert (await conn.run("test -e $HOME/bin/nvidia-smi || test -e $HOME/bin/k3s")).exit_status == 1
    assert await asyncio.to_thread(Path(home, "f.txt").read_text) == "data\n"


async def test_only_launch_keys_and_login_user(local: httpx.AsyncClient, ssh_key: asyncssh.SSHKey,
                                               pubkey: str) -> None:
    m = await _local_machine(local, pubkey)
    stranger = asyncssh.generate_private_key("ssh-ed25519")
    with pytest.raises(asyncssh.PermissionDenied):
        async with _connect(m["ssh_port"], stranger):
            pass
    with pytest.raises(asyncssh.PermissionDenied):
        async with _connect(m["ssh_port"], ssh_key, user="root"):
            pass


async def test_pty_shell(local: httpx.AsyncClient, ssh_key: asyncssh.SSHKey, pubkey: str) -> None:
    m = await _local_machine(local, pubkey)
    async with _connect(m["ssh_port"], ssh_key) as conn:
        proc = await conn.create_process(term_type="xterm", term_size=(100, 30))
        proc.stdin.write("tty; stty size; echo marker-$((40+2))\n")
        out = ""
        while "marker-42" not in out.replace("marker-$((40+2))", ""):
            out += await asyncio.wait_for(proc.stdout.read(4096), 5)
        assert "/dev/pts/" in out and "30 100" in out
        proc.stdin.write("exit 5\n")
        await asyncio.wait_for(proc.wait_closed(), 5)
        assert proc.exit_status == 5


async def test_openssh_client_gets_a_shell(local: httpx.AsyncClient, ssh_key: asyncssh.SSHKey, pubkey: str,
                                           tmp_path: Path) -> None:
    m = await _local_machine(local, pubkey)
    key_file = tmp_path / "id"
    ssh_key.write_private_key(str(key_file))
    os.chmod(key_file, 0o600)
    proc = await asyncio.create_subprocess_exec(
        "ssh", "-tt", "-p", str(m["ssh_port"]), "-i", str(key_file), "-o", "StrictHostKeyChecking=no",
        "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
        "gpuprov@127.0.0.1",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(proc.communicate(b"echo via-$((6*7))\nexit\n"), 10)
    assert b"via-42" in out and proc.returncode == 0


async def test_lambda_machine_has_simulated_nvidia_smi(lam: httpx.AsyncClient, ssh_key: asyncssh.SSHKey,
                                                       pubkey: str) -> None:
    (iid,) = (await launch_lambda(lam, pubkey, instance_type_name="gpu_8x_h100_sxm5")).json()["data"][
        "instance_ids"]
    inst = await wait_lambda(lam, iid)
    async with _lambda_ssh(inst, ssh_key) as conn:
        r = await conn.run("nvidia-smi --query-gpu=index,name,memory.total,uuid,driver_version "
                           "--format=csv,noheader,nounits")
        lines = r.stdout.splitlines()
        assert len(lines) == 8 and r.exit_status == 0
        idx, name, mem, uuid, driver = lines[3].split(", ")
        assert (idx, name, mem, driver) == ("3", "NVIDIA H100 80GB HBM3", "81559", "535.129.03")
        assert uuid.startswith("GPU-") and len({ln.split(", ")[3] for ln in lines}) == 8
        r = await conn.run("nvidia-smi --query-gpu=name,memory.total --format=csv")
        assert r.stdout.splitlines()[:2] == ["name, memory.total [MiB]", "NVIDIA H100 80GB HBM3, 81559 MiB"]
    with pytest.raises(asyncssh.PermissionDenied):
        async with _lambda_ssh(inst, ssh_key, user="gpuprov"):
            pass


async def test_lambda_machines_listen_on_their_own_address_port_22(
        lam: httpx.AsyncClient, admin: FakeCloudAdmin, ssh_key: asyncssh.SSHKey, pubkey: str) -> None:
    """Like real Lambda: the API gives only `ip`; SSH is on port 22 there, one machine per address."""
    r = await launch_lambda(lam, pubkey, quantity=2)
    insts = [await wait_lambda(lam, iid) for iid in r.json()["data"]["instance_ids"]]
    ips = [inst["ip"] for inst in insts]
    assert len(set(ips)) == 2 and "127.0.0.1" not in ips
    assert all(ipaddress.ip_address(ip).is_loopback for ip in ips)
    host_keys = set()
    for inst in insts:
        async with _lambda_ssh(inst, ssh_key) as conn:
            host_keys.add(conn.get_server_host_key().public_data)
            r2 = await conn.run("echo $USER $HOME; k3s --version")
            assert r2.stdout.splitlines() == [f"ubuntu {admin.machine(inst['id'])['home']}",
                                              "k3s version v1.31.4+k3s1 (simulated)"]
        assert admin.machine(inst["id"])["host"] == inst["ip"]
        assert admin.machine(inst["id"])["ssh_port"] == 22
    assert len(host_keys) == 2  # two machines, not one server behind two names


async def test_not_listening_before_boot_nor_after_death(local: httpx.AsyncClient, admin: FakeCloudAdmin,
                                                         ssh_key: asyncssh.SSHKey, pubkey: str) -> None:
    admin.configure(boot_delay=0.5)
    m = (await create_local(local, pubkey)).json()
    assert admin.machine(m["id"])["ssh_port"] is None  # no server yet
    m = await wait_local(local, m["id"])
    async with _connect(m["ssh_port"], ssh_key) as conn:
        assert (await conn.run("true")).exit_status == 0
    admin.kill(m["id"])
    with pytest.raises(OSError):
        async with _connect(m["ssh_port"], ssh_key):
            pass


async def test_a_connection_made_before_the_machine_goes_is_dropped_with_it(
        local: httpx.AsyncClient, admin: FakeCloudAdmin, ssh_key: asyncssh.SSHKey, pubkey: str) -> None:
    """A preempted machine answers nothing more, on a connection made before too: a reused client
    connection read the exit file a dying command wrote as the simulation killed it one process at
    a time (a job preempted mid-command reported succeeded)."""
    m = await _local_machine(local, pubkey)
    async with _connect(m["ssh_port"], ssh_key) as conn:
        assert (await conn.run("true")).exit_status == 0
        admin.preempt(m["id"])
        with pytest.raises((asyncssh.Error, OSError)):
            await asyncio.wait_for(conn.run("true", check=True), 10)


async def test_user_data_script_runs_at_boot(local: httpx.AsyncClient, admin: FakeCloudAdmin,
                                             pubkey: str, ssh_key: asyncssh.SSHKey) -> None:
    script = "#!/bin/bash\nmktemp > $HOME/temporary && echo booted > $HOME/marker\n"
    m = (await create_local(local, pubkey, user_data=script)).json()
    m = await wait_local(local, m["id"])
    home = Path(admin.machine(m["id"])["home"])

    def written() -> str:
        return (home / "marker").read_text() if (home / "marker").exists() else ""
    booted = await eventually(lambda: asyncio.to_thread(written), within=WITHIN, what="the boot script")
    assert booted == "booted\n"
    # The machine's temporary files are its own (under its root's /tmp), never in the host's /tmp:
    # a boot script's, and a login's.
    async with _connect(m["ssh_port"], ssh_key) as conn:
        login = (await conn.run("mktemp", check=True)).stdout
    for made in ((home / "temporary").read_text(), str(login)):
        assert Path(made.strip()).parent == tmp_of(home), made


async def test_pty_shell_hangs_up_when_client_leaves(local: httpx.AsyncClient, ssh_key: asyncssh.SSHKey,
                                                     pubkey: str) -> None:
    m = await _local_machine(local, pubkey)
    async with _connect(m["ssh_port"], ssh_key) as conn:
        proc = await conn.create_process(term_type="xterm")
        proc.stdin.write("echo pid=$$\n")
        out = ""
        while "pid=" not in out.replace("pid=$$", ""):
            out += await asyncio.wait_for(proc.stdout.read(4096), 5)
        pid = int(out.replace("pid=$$", "").split("pid=")[1].split()[0])
    # connection closed: the shell must get SIGHUP and go
    await eventually(lambda: not process_alive(pid), within=WITHIN, what="the shell to go with its client")


async def test_cloud_init_keys_in_lambda_user_data_can_log_in(lam: httpx.AsyncClient,
                                                              ssh_key: asyncssh.SSHKey, pubkey: str) -> None:
    """Lambda takes one key name per launch; the adapter passes further keys as cloud-config
    (MIME multipart beside the caller's script). The machine must honour both parts."""
    from providers.lambda_ import merge_user_data

    second = asyncssh.generate_private_key("ssh-ed25519")
    stranger = asyncssh.generate_private_key("ssh-ed25519")
    script = "#!/bin/sh\necho booted > booted.txt\n"
    user_data = merge_user_data([second.export_public_key().decode()], script)
    r = await launch_lambda(lam, pubkey, user_data=user_data)
    assert r.status_code == 200, r.text
    inst = await wait_lambda(lam, r.json()["data"]["instance_ids"][0])
    for key in (ssh_key, second):
        async with _lambda_ssh(inst, key) as conn:
            assert (await conn.run("echo hi")).stdout == "hi\n"
    with pytest.raises(asyncssh.PermissionDenied):
        async with _lambda_ssh(inst, stranger):
            pass
    async with _lambda_ssh(inst, ssh_key) as conn:
        async def booted() -> bool:  # the script runs once, shortly after boot
            return (await conn.run("cat booted.txt")).exit_status == 0
        await eventually(booted, within=WITHIN, what="the boot script")
        assert (await conn.run("cat booted.txt")).stdout == "booted\n"


async def test_invalid_cloud_config_is_refused_at_launch(lam: httpx.AsyncClient, pubkey: str) -> None:
    r = await launch_lambda(lam, pubkey, user_data="#cloud-config\nssh_authorized_keys: [unclosed\n")
    assert r.status_code == 400 and r.json()["error"]["code"] == "global/invalid-parameters"


async def test_keys_added_to_authorized_keys_log_in_as_with_sshd(
        local: httpx.AsyncClient, ssh_key: asyncssh.SSHKey, pubkey: str) -> None:
    """What gpuprov's WAIT_SSH (activities/ssh.py authorize_keys_command) writes, run on the machine
    itself, lets the user's key in; running it twice adds nothing; a key comment full of shell stays text."""
    from activities.ssh import authorize_keys_command

    m = await _local_machine(local, pubkey)
    user = asyncssh.generate_private_key("ssh-ed25519", comment="me; touch pwned $(id)")
    line = user.export_public_key().decode().strip()
    with pytest.raises(asyncssh.PermissionDenied):
        async with _connect(m["ssh_port"], user):
            pass
    async with _connect(m["ssh_port"], ssh_key) as conn:
        for _ in range(2):
            assert (await conn.run(authorize_keys_command([line]))).exit_status == 0
        listed = (await conn.run("cat ~/.ssh/authorized_keys; ls")).stdout
    assert listed.count(line) == 1 and "pwned" not in listed.replace(line, "")
    async with _connect(m["ssh_port"], user) as conn:
        assert (await conn.run("true")).exit_status == 0
