"""A job's machine on a simulated cloud, through the real workflows: its first login (WAIT_SSH) pins
the host key the machine's SSH server presents, the instance shows it (fingerprint, known_hosts
line), and the job runs held to it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncssh

from tests.jobs.conftest import Stack
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
