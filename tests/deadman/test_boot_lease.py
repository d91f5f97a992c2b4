"""The lease's timer installed at boot (issue 25, part 3: "systemd via cloud-init where the cloud runs
it"): the create activity puts it in the user data of clouds whose machines run cloud-init (AWS,
GCP), as a systemd service the machine's cloud-init writes and enables. On the simulated machines
the cloud-init slice writes its files under the machine's own root and the FAKE systemd
(fakeclouds/fake_systemd.py) runs the unit: the lease runs from boot with nobody ever logging in,
and a reboot starts the timer again. The host's own /etc and systemd are untouched."""

from __future__ import annotations

import email
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncssh
import pytest
import sqlalchemy as sa
import yaml
from cryptography.fernet import Fernet
from sqlmodel import Session
from temporalio.testing import ActivityEnvironment

from activities import lease
from activities.cloud import CloudActivities
from activities.deps import ActivityDeps
from api.serve import process_alive
from fakeclouds import cloudinit as sim_cloudinit
from fakeclouds import guest_power
from fakeclouds.engine import Engine, Machine
from fakeclouds.server import FakeCloudServer
from messages.activities import CreateInput
from messages.allocation import CloudTarget
from providers import aws as aws_adapter
from providers import registry
from providers.aws import AwsProvider
from providers.base import InstanceRef, OfferQuery
from providers.cloudinit import LEASE_SCRIPT, LEASE_UNIT
from store.models import Instance
from store.secrets import SecretBox
from tests import migrated, simclouds
from tests.aws.conftest import USER_KEY, aws, aws_sim, ec2, offer, sim, spec  # noqa: F401 (fixtures)
from tests.eventually import eventually

LEASE_H = 3.0  # 3 s with GPUPROV_LEASE_HOUR_S=1
HOST_FILES = (Path("/etc/systemd/system") / LEASE_UNIT, Path(LEASE_SCRIPT))


@pytest.fixture
def scaled(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(lease.HOUR_S_ENV, "1")  # a lease hour lasts a second
    monkeypatch.setenv(lease.POLL_S_ENV, "0.1")  # the machine's timer looks ten times a second
    assert not any(p.exists() for p in HOST_FILES)  # what "untouched" is checked against
    yield
    assert not any(p.exists() for p in HOST_FILES)  # the host's own /etc never got the unit


def _timer_pid(engine: Engine, m: Machine) -> int | None:
    """The pid the lease timer recorded, if that process runs and is the timer (its mark)."""
    try:
        pid = int((engine.machine_home(m) / ".gpuprov" / "lease-timer.pid").read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if lease.TIMER_MARK.encode() in cmdline else None


def _timers(engine: Engine, m: Machine) -> list[int]:
    """Every running lease timer of m: its processes carry the machine's HOME and the mark. A
    timer's own fork (a `$(...)` about to exec `date` or `cat`) shows its parent's command line for
    a moment: not counted."""
    home = f"HOME={engine.machine_home(m)}".encode()
    found: dict[int, int] = {}  # pid -> parent pid
    for proc in Path("/proc").iterdir():
        try:
            if (proc.name.isdigit() and lease.TIMER_MARK.encode() in (proc / "cmdline").read_bytes()
                    and home in (proc / "environ").read_bytes().split(b"\0")):
                found[int(proc.name)] = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return sorted(pid for pid, parent in found.items() if parent not in found)


def _state(ec2: Any, ref: InstanceRef) -> str:  # noqa: F811 — boto3's client, not the fixture
    found = ec2.describe_instances(InstanceIds=[ref.instance_id])["Reservations"][0]["Instances"][0]
    return str(found["State"]["Name"])


def test_the_timer_rides_in_the_user_data_after_the_callers_own() -> None:
    """AWS's user data: the keys, the caller's cloud-config, then the lease's cloud-config, which
    asks cloud-init to append its lists (the caller's runcmd and write_files survive)."""
    at_boot = lease.at_boot("aws", 2.0)
    assert at_boot is not None and at_boot.user == "ubuntu"
    mine = "#cloud-config\nruncmd:\n  - echo mine\nwrite_files:\n  - path: /etc/mine\n    content: x\n"
    data = aws_adapter.user_data(["ssh-ed25519 AAAA k"], mine, lease=at_boot)
    parsed = sim_cloudinit.parse(data)
    assert parsed.runcmd == ["echo mine", "systemctl daemon-reload", f"systemctl enable --now {LEASE_UNIT}"]
    assert [f.path for f in parsed.files] == ["/etc/mine", LEASE_SCRIPT, f"/etc/systemd/system/{LEASE_UNIT}"]
    parts = [str(p.get_payload()) for p in email.message_from_string(data).walk() if not p.is_multipart()]
    assert parts[-1].startswith("#cloud-config\n")
    assert yaml.safe_load(parts[-1])["merge_how"][0] == {"name": "list", "settings": ["append"]}
    unit = next(f for f in parsed.files if f.path.endswith(LEASE_UNIT)).content.decode()
    assert "User=ubuntu\n" in unit and f"ExecStart=/bin/sh {LEASE_SCRIPT}\n" in unit
    assert "Restart=on-failure" in unit and "WantedBy=multi-user.target" in unit


@pytest.mark.parametrize(("cloud", "hours", "boot"), [
    ("aws", 2.0, True), ("gcp", 2.0, True),
    ("aws", 0.0, False),  # lease off
    ("local", 2.0, False),  # self-ends, but its timer is started over SSH (no cloud-init there)
    ("runpod", 2.0, False),  # a container: no systemd
    ("lambda", 2.0, False),  # nothing on the machine ends its bill: no lease at all
    ("ssh", 2.0, False),  # a user's own host is never leased
])
def test_which_creates_carry_the_timer(cloud: str, hours: float, boot: bool) -> None:
    assert (lease.at_boot(cloud, hours) is not None) == boot
    assert registry.capabilities(cloud).self_end.boot_timer == (cloud in ("aws", "gcp"))


@pytest.mark.usefixtures("scaled")
async def test_an_instance_nobody_ever_logs_into_ends_itself_when_its_boot_lease_runs_out(
        sim: FakeCloudServer, ec2: Any, tmp_path: Path) -> None:  # noqa: F811
    """Through the real create activity (it reads the allocation's lease from its row) and the
    unchanged boto3: the control plane is gone right after the create; nothing ever renews."""
    db = migrated.sqlite_engine(tmp_path / "boot.db")
    box = SecretBox(Fernet.generate_key())
    deps = ActivityDeps(engine=db, box=box, installation_id="bootls01")
    try:
        ref = await _create(db, box, deps, sim)
    finally:
        await deps.aclose()
        deps.executor.shutdown(wait=False)
        db.dispose()
    m = sim.engine.machines[ref.instance_id]
    await eventually(lambda: _state(ec2, ref), until=lambda s: s == "terminated", within=30,
                     what="the instance ending itself when its lease ran out")
    home = sim.engine.machine_home(m)
    assert (home / ".gpuprov" / "boot-lease").exists()  # the service's script wrote the first lease
    assert "the lease ran out" in (home / ".gpuprov" / "lease.log").read_text()
    assert any("shutdown -h now -> poweroff" in line for line in guest_power.record(sim.engine, m))
    assert sim.engine.calls.logins_json().get(m.id, 0) == 0  # nobody logged in to start anything


async def _create(db: sa.Engine, box: SecretBox, deps: ActivityDeps,
                  sim: FakeCloudServer) -> InstanceRef:  # noqa: F811 — the fixture's value, passed
    with Session(db) as s:
        connection = simclouds.add_connection(s, box, sim, "aws")
        s.add(Instance(id="bootls-a1", provider="aws", connection_id=connection, workflow_id="w",
                       lease_hours=LEASE_H))
        s.commit()
    p = simclouds.provider(sim, "aws", installation_id="bootls01")
    async with p:
        [o] = [o for o in await p.offers(OfferQuery(region="us-east-1", spot=False))
               if o.instance_type == "g4dn.xlarge" and o.zone == "us-east-1a"]
    with simclouds.allowed(deps, sim):
        return await ActivityEnvironment().run(CloudActivities(deps).create_instance, CreateInput(
            target=CloudTarget(connection_id=connection, cloud="aws"), key="bootls-a1-1",
            offer=o.model_copy(update={"connection_id": connection}), allocation_id="bootls-a1",
            ssh_public_keys=[USER_KEY.export_public_key().decode().strip()], heartbeat_every_s=0.2,
            poll_interval_s=0.05))


@pytest.mark.usefixtures("scaled")
async def test_after_a_reboot_systemd_starts_the_timer_again(aws: AwsProvider, sim: FakeCloudServer,  # noqa: F811
                                                             ec2: Any) -> None:  # noqa: F811
    """A detached timer dies with a reboot; the service comes back by itself, with no renewal, and
    then ends the machine when its lease runs out. The boot lease is long (a slow host's reboot
    must not outlast it); a renewal after the reboot shortens it."""
    ref = await aws.create(await offer(aws), spec(aws, lease=lease.at_boot("aws", 600.0)))
    m = sim.engine.machines[ref.instance_id]
    first = await eventually(lambda: _timer_pid(sim.engine, m), within=30, what="the boot timer")
    assert m.address and m.ssh_port
    async with asyncssh.connect(m.address, m.ssh_port, username="ubuntu", client_keys=[USER_KEY],
                                known_hosts=None, agent_path=None) as conn:
        enabled = await conn.run(f"systemctl is-enabled {LEASE_UNIT}; systemctl is-active {LEASE_UNIT}")
        assert str(enabled.stdout).split() == ["enabled", "active"]
        other = await conn.run("systemctl status")  # only the units it installed are simulated
        assert other.exit_status == 126 and "not available here" in str(other.stderr)
        # The watch's renewal finds the service's timer running and starts no detached second one.
        renew = lease.renew_command(600.0, registry.capabilities("aws").self_end)
        renewed = await conn.run(renew + "true")
        assert renewed.exit_status == 0 and lease.NOT_RENEWED not in str(renewed.stderr)
        assert _timer_pid(sim.engine, m) == first and _timers(sim.engine, m) == [first]
        await conn.run("sudo reboot")
    await eventually(lambda: not process_alive(first), within=30, what="the reboot to end the first timer")
    again = await eventually(lambda: _timer_pid(sim.engine, m), within=30, what="systemd's timer again")
    assert again != first and _timers(sim.engine, m) == [again]
    async with asyncssh.connect(m.address, m.ssh_port, username="ubuntu", client_keys=[USER_KEY],
                                known_hosts=None, agent_path=None) as conn:
        await conn.run(lease.renew_command(LEASE_H, registry.capabilities("aws").self_end) + "true")
    assert _timers(sim.engine, m) == [again]  # still the service's timer, no detached one
    await eventually(lambda: _state(ec2, ref), until=lambda s: s == "terminated", within=30,
                     what="the machine ending itself, by the timer systemd started after the reboot")
    assert not process_alive(again)
