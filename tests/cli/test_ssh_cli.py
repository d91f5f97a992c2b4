"""Item 7: an instance shows the host key gpuprov pinned (fingerprint and a known_hosts line; a fleet
host's from its fleet, with the bastion's route and key), and `gpuprov ssh <id>` logs in with the
real OpenSSH client against that key only."""

from __future__ import annotations

import asyncio
import random
import tempfile
from pathlib import Path
from typing import Any

import asyncssh
import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient
from sqlmodel import Session
from typer.testing import CliRunner

from cli import app
from cli.ssh import NoHostKey, plan
from fakeclouds.machine_processes import remove_once_unused
from fakeclouds.ssh import MachineSSH
from providers.ssh_fleet import SshFleetProvider
from store import fleets
from store.models import Instance
from store.secrets import SecretBox

runner = CliRunner()
HOST_KEY = asyncssh.generate_private_key("ssh-ed25519")
BASTION_KEY = asyncssh.generate_private_key("ssh-ed25519")
FLEET_KEY = asyncssh.generate_private_key("ssh-ed25519")


def line(key: asyncssh.SSHKey) -> str:
    return key.export_public_key().decode().strip()


def blob(key: asyncssh.SSHKey) -> str:
    return line(key).split()[1]


def add_instance(engine: sa.Engine, iid: str, *, host: str = "127.0.0.9", port: int = 2222,
                 provider: str = "fakecloud", connection: str = "c1", pin: str | None = None,
                 pinned_for: str = "k1/m-1") -> None:
    with Session(engine) as s:
        s.add(Instance(id=iid, project="default", provider=provider, connection_id=connection,
                       workflow_id=f"allocation-{iid}", status="ready", phase="ready", ssh_host=host,
                       ssh_port=port, ssh_user="ubuntu", key="k1", cloud_instance_id="m-1", host_key=pin,
                       host_key_machine=pinned_for if pin else None))
        s.commit()


def get(api: TestClient, iid: str) -> dict[str, Any]:
    r = api.get(f"/api/compute/instances/{iid}", headers={"Authorization": "Bearer cli-test-token"})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_an_instance_shows_its_pinned_host_key_once_seen(api: TestClient, engine: sa.Engine) -> None:
    add_instance(engine, "seen", pin=line(HOST_KEY))
    add_instance(engine, "unseen")
    add_instance(engine, "stale", pin=line(HOST_KEY), pinned_for="k0/m-0")  # an earlier attempt's machine
    got = get(api, "seen")
    assert got["host_key"] == {"fingerprint": HOST_KEY.get_fingerprint("sha256"),
                               "known_hosts": f"[127.0.0.9]:2222 ssh-ed25519 {blob(HOST_KEY)}"}
    assert got["ssh"]["bastion"] is None
    assert get(api, "unseen")["host_key"] is None and get(api, "stale")["host_key"] is None
    listed = {i["id"]: i for i in api.get("/api/compute/instances",
                                          headers={"Authorization": "Bearer cli-test-token"}).json()["items"]}
    assert listed["seen"]["host_key"] == got["host_key"]


def test_a_fleet_host_shows_the_fleets_pins_and_its_bastion(api: TestClient, engine: sa.Engine) -> None:
    with Session(engine) as s:
        n = iter(range(10))
        fleets.save_fleet(s, SecretBox(Fernet.generate_key()), fleet_id="flt1", project="default",
                          name="rack", user="ubuntu", port=22, hosts=["10.1.2.3"],
                          private_key=FLEET_KEY.export_private_key().decode(),
                          bastion=fleets.Bastion("127.0.0.7", 2200, "jump", None),
                          new_host_id=lambda: f"h{next(n)}")
        for h in fleets.hosts_of(s, "flt1"):
            h.host_key = line(HOST_KEY)
            s.add(h)
        f = fleets.get_fleet(s, "default", "flt1")
        assert f is not None
        f.bastion_host_key = line(BASTION_KEY)
        s.add(f)
        s.commit()
    add_instance(engine, "onprem", host="10.1.2.3", port=22, provider=SshFleetProvider.id, connection="flt1")
    got = get(api, "onprem")
    assert got["host_key"]["known_hosts"] == f"10.1.2.3 ssh-ed25519 {blob(HOST_KEY)}"
    assert got["ssh"]["bastion"] == {
        "host": "127.0.0.7", "port": 2200, "user": "jump",
        "host_key": {"fingerprint": BASTION_KEY.get_fingerprint("sha256"),
                     "known_hosts": f"[127.0.0.7]:2200 ssh-ed25519 {blob(BASTION_KEY)}"}}
    p = plan(got, "/tmp/kh")
    assert p.argv[p.argv.index("-J") + 1] == "jump@127.0.0.7:2200"
    assert p.argv[-3:] == ["-p", "22", "ubuntu@10.1.2.3"]
    assert p.known_hosts == (f"10.1.2.3 ssh-ed25519 {blob(HOST_KEY)}\n"
                             f"[127.0.0.7]:2200 ssh-ed25519 {blob(BASTION_KEY)}\n")


def test_the_plan_pins_strictly_and_refuses_without_a_key() -> None:
    inst = {"id": "i1", "status": "ready", "ssh": {"host": "127.0.0.9", "port": 22, "user": "ubuntu"},
            "host_key": {"fingerprint": "SHA256:x", "known_hosts": "127.0.0.9 ssh-ed25519 AAAA"}}
    p = plan(inst, "/tmp/kh", options=["StrictHostKeyChecking=no"], extra=["true"])
    # Ours come first: OpenSSH keeps the first value of an option, so a user's `-o` cannot unpin it.
    assert p.argv.index("StrictHostKeyChecking=yes") < p.argv.index("StrictHostKeyChecking=no")
    assert "UserKnownHostsFile=/tmp/kh" in p.argv and "GlobalKnownHostsFile=/dev/null" in p.argv
    assert "-J" not in p.argv and p.argv[-4:] == ["-p", "22", "ubuntu@127.0.0.9", "true"]
    assert p.known_hosts == "127.0.0.9 ssh-ed25519 AAAA\n"
    with pytest.raises(NoHostKey, match="has not seen the host key"):
        plan({**inst, "host_key": None}, "/tmp/kh")
    with pytest.raises(NoHostKey, match="no SSH address"):
        plan({**inst, "ssh": None}, "/tmp/kh")


def test_gpuprov_ssh_refuses_an_instance_whose_key_is_not_known(engine: sa.Engine) -> None:
    add_instance(engine, "unseen")
    r = runner.invoke(app, ["ssh", "unseen"])
    assert r.exit_code == 1 and "has not seen the host key" in r.output and "unpinned" in r.output


async def test_gpuprov_ssh_logs_in_with_the_pinned_key_and_refuses_another(
        engine: sa.Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    known_hosts_file = Path.home() / ".ssh" / "known_hosts"
    user_key = asyncssh.generate_private_key("ssh-ed25519")
    key_file = tmp_path / "id_ed25519"
    user_key.write_private_key(str(key_file))
    key_file.chmod(0o600)
    home = Path(tempfile.mkdtemp(prefix="sshcli", dir="/tmp"))
    server = MachineSSH(home=home, host_key=HOST_KEY, user="ubuntu", public_keys=[line(user_key)])
    host = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"
    port = await server.start(host)
    monkeypatch.setenv("SSH_AUTH_SOCK", "")  # no agent: the key given only
    args = ["-i", str(key_file), "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR"]
    try:
        add_instance(engine, "pinned", host=host, port=port, pin=line(HOST_KEY))
        r = await asyncio.to_thread(runner.invoke, app, ["ssh", "pinned", *args, "touch", "was-here"])
        assert r.exit_code == 0, r.output
        assert (home / "was-here").exists()  # the login ran the command on the machine

        # Another key pinned (as if the machine had been swapped): ssh itself refuses the host.
        add_instance(engine, "other", host=host, port=port, pin=line(BASTION_KEY))
        r = await asyncio.to_thread(runner.invoke, app, ["ssh", "other", *args, "touch", "not-here"])
        assert r.exit_code == 255, r.output
        assert not (home / "not-here").exists()
        mine = known_hosts_file.read_text() if known_hosts_file.exists() else ""  # noqa: ASYNC240
        assert host not in mine  # the user's own known_hosts is not written
    finally:
        await server.stop()
        remove_once_unused(home)
