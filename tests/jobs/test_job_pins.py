"""A job's machine on a simulated cloud, through the real workflows: its first login (WAIT_SSH) pins
the host key the machine's SSH server presents, the instance shows it (fingerprint, known_hosts
line), and the job runs held to it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncssh
from sqlmodel import Session

from providers.host_keys import fingerprint
from store.models import Instance
from tests.jobs.conftest import Stack
from tests.jobs.test_jobs import machine_gone
from tests.processes import until


async def test_a_jobs_machine_is_pinned_at_its_first_login_and_shows_its_key(stack: Stack) -> None:
    job_id = await stack.run('echo up; while [ ! -e "$HOME/go" ]; do sleep 0.1; done; echo pinned')
    job = await stack.until_status(job_id, "running")

    async def running_machine() -> dict[str, Any] | None:
        machines = await stack.live_machines()
        home = [m for m in machines if (Path(m["home"]) / ".gpuprov" / "jobs" / job_id).exists()]
        return home[0] if home else None

    machine = await until(running_machine, 60, "the job's machine")
    presented = asyncssh.read_private_key(str(Path(machine["home"]).parent / "host_key"))
    r = await stack.http.get(f"/api/compute/instances/{job['allocation_id']}")
    assert r.status_code == 200, r.text
    inst = r.json()
    assert inst["host_key"]["fingerprint"] == presented.get_fingerprint("sha256"), inst
    key_type, blob = presented.export_public_key().decode().split()[:2]
    assert inst["host_key"]["known_hosts"] == f"{inst['ssh']['host']} {key_type} {blob}"  # port 22
    (Path(machine["home"]) / "go").touch()
    await stack.until_status(job_id, "succeeded")
    assert await stack.logs(job_id) == b"up\npinned\n"


async def test_a_job_whose_machine_shows_another_key_fails_naming_both_and_its_machine_goes(
        stack: Stack) -> None:
    """H1 through the workflows: the job runs; the worker stops; the machine's pin no longer matches
    what it presents (as when another server answers at its address). The run's retry is refused
    before it logs in: the job ends `failed` with both fingerprints, not retried, its machine gone."""
    job_id = await stack.run('echo up; while [ ! -e "$HOME/go" ]; do sleep 0.1; done; echo never')
    job = await stack.until_status(job_id, "running")

    async def started() -> bool:
        return await stack.logs(job_id) == b"up\n"

    await until(started, 60, "the job's first line")
    await stack.stop_worker()
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    with Session(stack.deps.engine) as s:
        row = s.get(Instance, job["allocation_id"])
        assert row is not None and row.host_key is not None
        presented, row.host_key = row.host_key, other
        s.add(row)
        s.commit()
    await stack.start_worker()
    job = await stack.until_status(job_id, "failed", within_s=120)
    why = f"host key changed: got {fingerprint(presented)}, expected {fingerprint(other)}"
    assert why in job["error"], job
    assert job["exit_code"] is None
    await machine_gone(stack, job)
    assert await stack.logs(job_id) == b"up\n"
