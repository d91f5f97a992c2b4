"""The one SSH path, pinned (activities/machine_ssh.py), against real SSH servers on loopback.

H1: a job on a fleet host whose pinned key is known runs while a SwitchProxy in front of the host
forwards to the genuine server; the proxy then switches to an IMPOSTOR SSH server (another host
key, lets anyone in, records what it is sent) and drops the open connection. The job's retried run
must fail with the changed-key reason naming both fingerprints, and the impostor must have been
sent nothing. A bastion fleet's job dials through the bastion; a cloud machine is pinned at its
first login (WAIT_SSH) and held to that key afterwards. Also L1 (the image after docker's options)
and L5 (a launch that cannot succeed fails the job once, not forever).

The activities run in temporalio's ActivityEnvironment (a retry is a second run), the app database
is a fresh SQLite file, every server listens on 127.x.y.z.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh
import pytest
import sqlalchemy as sa
from sqlmodel import Session, select
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

import logsafe
from activities.deps import ActivityDeps
from activities.jobs import JobActivities
from activities.ssh import SshActivities
from fakeclouds.ssh import MachineSSH
from messages.activities import SshTarget
from messages.enums import ErrorKind
from messages.job import RunJobInput
from providers.fleet_addresses import FleetAddresses
from providers.host_keys import fingerprint
from providers.ssh_fleet import SshFleetProvider
from store import fleets
from store.models import Instance, Job, JobLogChunk
from store.secrets import SecretBox
from tests import migrated
from tests.fleets.test_allocate import BEHIND, FLEET_KEY, _Jump
from tests.fleets.test_probe import LOOPBACK
from tests.processes import until


class SwitchProxy:
    """A TCP proxy on loopback whose target can be switched; a switch drops the open connections
    (as a route change or a restarted host would), so the next login meets the new target."""

    def __init__(self, host: str, target: tuple[str, int]) -> None:
        self.host, self.target = host, target
        self.port = 0
        self._open: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def switch(self, target: tuple[str, int]) -> None:
        self.target = target
        for w in list(self._open):
            w.close()

    async def close(self) -> None:
        self.switch(self.target)
        if self._server is not None:
            self._server.close()

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            ur, uw = await asyncio.open_connection(*self.target)
        except OSError:
            w.close()
            return
        self._open |= {w, uw}

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pump(r, uw), pump(ur, w))
        self._open -= {w, uw}


@dataclass
class Seen:
    connections: int = 0  # TCP connections that reached the impostor's SSH server
    logins: int = 0  # authentications begun: the client accepted the impostor's host key
    commands: list[str] = field(default_factory=list)


class _Impostor(asyncssh.SSHServer):
    """An IMPOSTOR host: any user in without a key; records every connection, login and command."""

    def __init__(self, seen: Seen) -> None:
        self.seen = seen

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.seen.connections += 1

    def begin_auth(self, username: str) -> bool:
        self.seen.logins += 1
        return False  # no authentication needed


async def impostor(host: str) -> tuple[asyncssh.SSHAcceptor, int, Seen, asyncssh.SSHKey]:
    seen = Seen()
    key = asyncssh.generate_private_key("ssh-ed25519")

    async def handle(process: asyncssh.SSHServerProcess[str]) -> None:
        seen.commands.append(str(process.command))
        process.stdout.write("FAKE OUTPUT\n")
        process.exit(0)

    server = await asyncssh.create_server(lambda: _Impostor(seen), host, 0, server_host_keys=[key],
                                          process_factory=handle)
    return server, server.sockets[0].getsockname()[1], seen, key


def line(key: asyncssh.SSHKey) -> str:
    return key.export_public_key().decode().strip()


# A FAKE docker: parses `docker run`'s options the way the real CLI does (they end at the first
# argument that is not one, or at `--`; -v, -w, --name, --gpus take a value) and prints them.
FAKE_DOCKER = r"""#!/bin/bash
[ "$1" = run ] || exit 0; shift
opts=()
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; break;;
    -v|-w|--name|--gpus) opts+=("$1"); shift 2;;
    -*) opts+=("$1"); shift;;
    *) break;;
  esac
done
echo "options: ${opts[*]}"
echo "image: $1"
"""


@dataclass
class Lab:
    engine: sa.Engine
    deps: ActivityDeps
    net: str
    home: Path
    genuine: MachineSSH
    genuine_port: int
    host_key: asyncssh.SSHKey


@pytest.fixture
async def lab(tmp_path: Path, secret_box: SecretBox) -> AsyncIterator[Lab]:
    engine = migrated.sqlite_engine(tmp_path / "app.db")
    # Fleet hosts on loopback allowed, as in the fleet tests (GPUPROV_FLEET_ALLOWED_NETWORKS).
    deps = ActivityDeps(engine=engine, box=secret_box, installation_id="pins0001", fleet_addresses=LOOPBACK)
    net = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}"
    home = Path(tempfile.mkdtemp(prefix="hk", dir="/tmp"))
    (home / "bin").mkdir()
    (home / "bin" / "docker").write_text(FAKE_DOCKER)
    (home / "bin" / "docker").chmod(0o755)
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    genuine = MachineSSH(home=home, host_key=host_key, user="ubuntu", public_keys=[deps.public_key()],
                         env={"PATH": f"{home / 'bin'}:/usr/bin:/bin"})
    port = await genuine.start(f"{net}.41")
    try:
        yield Lab(engine, deps, net, home, genuine, port, host_key)
    finally:
        await genuine.stop()
        engine.dispose()
        stop_jobs(home)
        shutil.rmtree(home, ignore_errors=True)


def stop_jobs(home: Path) -> None:
    """Stop what the tests' jobs left running on the genuine host (a job cut off by the impostor
    waits for its `go` file forever): the detached command's process group, by its pid file."""
    for pid_file in home.glob(".gpuprov/jobs/*/pid"):
        with contextlib.suppress(ValueError, OSError):
            os.killpg(int(pid_file.read_text().strip()), signal.SIGKILL)


def add_fleet(lab: Lab, host: str, port: int, *, pin: str | None,
              bastion: fleets.Bastion | None = None) -> None:
    with Session(lab.engine) as s:
        n = iter(range(100))
        fleets.save_fleet(s, lab.deps.box, fleet_id="flt1", project="default", name="rack", user="ubuntu",
                          port=port, hosts=[host], private_key=FLEET_KEY.export_private_key().decode(),
                          bastion=bastion, new_host_id=lambda: f"fh{next(n)}")
        for h in fleets.hosts_of(s, "flt1"):
            h.host_key = pin  # as the fleet's probe pinned it
            s.add(h)
        s.commit()


def add_job(lab: Lab, *, allocation: str, provider: str, connection: str, host: str, port: int,
            job: str = "job1", command: str = "true", key: str = "k1", machine: str = "m-1") -> None:
    with Session(lab.engine) as s:
        s.add(Instance(id=allocation, provider=provider, connection_id=connection,
                       workflow_id=f"w-{allocation}", ssh_host=host, ssh_port=port, ssh_user="ubuntu",
                       key=key, cloud_instance_id=machine))
        s.add(Job(id=job, name="t", type="task", command=command, requested_by="tests",
                  workflow_id=f"wj-{job}", allocation_id=allocation))
        s.commit()


def log_of(lab: Lab, job: str = "job1") -> bytes:
    with Session(lab.engine) as s:
        rows = s.exec(select(JobLogChunk).where(JobLogChunk.job_id == job)).all()
        return b"".join(r.data for r in sorted(rows, key=lambda r: r.offset))


def run_input(host: str, port: int, command: str, job: str = "job1", **fields: Any) -> RunJobInput:
    return RunJobInput(job_id=job, command=command, host=host, port=port, user="ubuntu", poll_interval_s=0.1,
                       heartbeat_every_s=0.5, **fields)


async def test_a_fleet_job_whose_host_turns_impostor_fails_naming_both_keys_and_sends_it_nothing(
        lab: Lab) -> None:
    front = f"{lab.net}.40"
    proxy = SwitchProxy(front, (lab.genuine.host or "", lab.genuine_port))
    await proxy.start()
    fake, fake_port, seen, fake_key = await impostor(f"{lab.net}.42")
    try:
        add_fleet(lab, front, proxy.port, pin=line(lab.host_key))
        add_job(lab, allocation="a1", provider=SshFleetProvider.id, connection="flt1", host=front,
                port=proxy.port)
        jobs = JobActivities(lab.deps)
        command = "echo started; while [ ! -e go ]; do sleep 0.1; done; echo SECRET-PAYLOAD"
        first = asyncio.create_task(ActivityEnvironment().run(jobs.run_job,
                                                              run_input(front, proxy.port, command)))

        async def started() -> bool | None:
            if first.done():
                first.result()  # raises what ended it early
            return True if b"started" in log_of(lab) else None

        await until(started, 60, "the job running on the genuine host")
        proxy.switch((f"{lab.net}.42", fake_port))  # from now on the impostor answers at the host's address
        with pytest.raises(Exception) as cut:  # noqa: PT011 — whatever a lost connection raises
            await first
        assert not (isinstance(cut.value, ApplicationError) and cut.value.non_retryable), cut.value

        # The retried run (as Temporal would start it) meets the impostor.
        with pytest.raises(ApplicationError) as refused:
            await ActivityEnvironment().run(jobs.run_job, run_input(front, proxy.port, command))
        e = refused.value
        assert e.non_retryable and e.type == ErrorKind.HOST_KEY_CHANGED, e
        got, expected = fingerprint(line(fake_key)), fingerprint(line(lab.host_key))
        assert f"got {got}, expected {expected}" in e.message, e.message
        assert "host key changed" in e.message
        assert seen.connections >= 1  # it was reached ...
        assert seen.logins == 0 and seen.commands == []  # ... and sent nothing: no login, no script
        assert b"FAKE OUTPUT" not in log_of(lab)
    finally:
        fake.close()
        await proxy.close()


async def test_a_job_on_a_bastion_fleet_dials_through_the_bastion(lab: Lab) -> None:
    """The host is named only by a name the bastion alone resolves: the job reaches it through it."""
    jump = await asyncssh.listen(f"{lab.net}.43", 0, server_factory=lambda: _Jump(lab.genuine.host or ""),
                                 server_host_keys=[asyncssh.generate_private_key("ssh-ed25519")])
    try:
        with pytest.raises(OSError):
            await asyncio.open_connection(BEHIND, lab.genuine_port)
        bastion = fleets.Bastion(host=f"{lab.net}.43", port=jump.sockets[0].getsockname()[1], user="jump",
                                 private_key=None)
        add_fleet(lab, BEHIND, lab.genuine_port, pin=line(lab.host_key), bastion=bastion)
        add_job(lab, allocation="a1", provider=SshFleetProvider.id, connection="flt1", host=BEHIND,
                port=lab.genuine_port)
        got = await ActivityEnvironment().run(JobActivities(lab.deps).run_job,
                                              run_input(BEHIND, lab.genuine_port, "echo behind $((6*7))"))
        assert got.exit_code == 0 and log_of(lab) == b"behind 42\n"
    finally:
        jump.close()


async def test_a_cloud_machine_is_pinned_at_its_first_login_and_held_to_that_key(lab: Lab) -> None:
    front = f"{lab.net}.40"
    proxy = SwitchProxy(front, (lab.genuine.host or "", lab.genuine_port))
    await proxy.start()
    fake, fake_port, seen, fake_key = await impostor(f"{lab.net}.42")
    try:
        add_job(lab, allocation="a2", provider="lambda", connection="c1", host=front, port=proxy.port)
        ssh = SshActivities(lab.deps)
        target = SshTarget(host=front, port=proxy.port, user="ubuntu", allocation_id="a2",
                           poll_interval_s=0.1)
        await ActivityEnvironment().run(ssh.wait_ssh, target)
        with Session(lab.engine) as s:
            row = s.get(Instance, "a2")
            assert row is not None and row.host_key == line(lab.host_key) and row.host_key_machine == "k1/m-1"
        assert await ActivityEnvironment().run(ssh.probe_gpus, target) == []  # no nvidia-smi: no GPUs

        proxy.switch((f"{lab.net}.42", fake_port))
        for step in (ssh.probe_gpus, ssh.install_k3s):
            with pytest.raises(ApplicationError) as refused:
                await ActivityEnvironment().run(step, target)
            assert refused.value.non_retryable and refused.value.type == ErrorKind.HOST_KEY_CHANGED
            assert str(fingerprint(line(fake_key))) in refused.value.message
        with pytest.raises(ApplicationError) as job_refused:
            await ActivityEnvironment().run(JobActivities(lab.deps).run_job,
                                            run_input(front, proxy.port, "true"))
        assert job_refused.value.type == ErrorKind.HOST_KEY_CHANGED
        assert seen.logins == 0 and seen.commands == []

        # Another attempt of the allocation is another machine: its first login pins afresh.
        with Session(lab.engine) as s:
            row = s.get(Instance, "a2")
            assert row is not None
            row.key, row.cloud_instance_id = "k2", "m-2"
            s.add(row)
            s.commit()
        await ActivityEnvironment().run(ssh.wait_ssh, target)
        with Session(lab.engine) as s:
            row = s.get(Instance, "a2")
            assert row is not None and row.host_key == line(fake_key) and row.host_key_machine == "k2/m-2"
    finally:
        fake.close()
        await proxy.close()


async def test_an_image_that_looks_like_an_option_is_passed_as_the_image(lab: Lab) -> None:
    """L1: `--privileged` as the image is the image (docker refuses it), never a `docker run` flag."""
    host = lab.genuine.host or ""
    add_job(lab, allocation="a3", provider="lambda", connection="c1", host=host, port=lab.genuine_port)
    got = await ActivityEnvironment().run(JobActivities(lab.deps).run_job,
                                          run_input(host, lab.genuine_port, "true", image="--privileged"))
    assert got.exit_code == 0
    out = log_of(lab).decode()
    assert "image: --privileged\n" in out, out
    options = out.split("options:", 1)[1].splitlines()[0]
    assert "--privileged" not in options, out


async def test_a_launch_that_cannot_succeed_fails_the_job_once_with_why(lab: Lab) -> None:
    """L5: the launch script fails on the host (a command with NUL cannot be run): non-retryable,
    with the reason, so the job ends and its machine is released instead of a retry without end."""
    host = lab.genuine.host or ""
    add_job(lab, allocation="a4", provider="lambda", connection="c1", host=host, port=lab.genuine_port)
    with pytest.raises(ApplicationError) as failed:
        await ActivityEnvironment().run(JobActivities(lab.deps).run_job,
                                        run_input(host, lab.genuine_port, "echo a\x00b"))
    assert failed.value.non_retryable and failed.value.type == ErrorKind.JOB_LAUNCH_FAILED, failed.value
    assert "could not start the job (exit" in failed.value.message


async def test_a_jobs_command_stays_out_of_the_workers_log(lab: Lab,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """L2: asyncssh logs every remote command at INFO; the worker's logging (logsafe.configure)
    keeps it below WARNING, so a job's command never reaches worker.log."""
    logsafe.configure(logging.INFO)
    caplog.set_level(logging.INFO)
    host = lab.genuine.host or ""
    add_job(lab, allocation="a5", provider="lambda", connection="c1", host=host, port=lab.genuine_port)
    got = await ActivityEnvironment().run(JobActivities(lab.deps).run_job,
                                          run_input(host, lab.genuine_port, "echo DISTINCTIVE-7f3a"))
    assert got.exit_code == 0 and log_of(lab) == b"DISTINCTIVE-7f3a\n"  # it ran ...
    logging.getLogger("gpuprov.worker").info("canary")
    assert "canary" in caplog.text  # ... the log is captured ...
    assert "DISTINCTIVE-7f3a" not in caplog.text  # ... without it


async def test_a_fleet_job_on_an_address_the_installation_refuses_dials_nothing(lab: Lab) -> None:
    """The job's login to a fleet host is checked as the fleet adapter's are (M2): loopback refused
    by default, before anything is dialled, and not retried."""
    host = lab.genuine.host or ""
    add_fleet(lab, host, lab.genuine_port, pin=line(lab.host_key))
    add_job(lab, allocation="a6", provider=SshFleetProvider.id, connection="flt1", host=host,
            port=lab.genuine_port, command="touch dialled")
    strict = ActivityDeps(engine=lab.engine, box=lab.deps.box, installation_id="pins0001",
                          fleet_addresses=FleetAddresses())  # the default: loopback refused
    with pytest.raises(ApplicationError) as refused:
        await ActivityEnvironment().run(JobActivities(strict).run_job,
                                        run_input(host, lab.genuine_port, "touch dialled"))
    assert refused.value.non_retryable and refused.value.type == ErrorKind.AUTH, refused.value
    assert not (lab.home / "dialled").exists() and not (lab.home / ".gpuprov").exists()
