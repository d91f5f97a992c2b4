"""Idle sampling, done by the watch each round (activities/watch.py): for every ready machine of a
connection, one SSH command with the installation's key reads its GPUs' utilisation (nvidia-smi)
and its open login sessions (`who`), and the job rows say whether a job runs on it. The sample is
stored per allocation (store/idle.py); a machine that cannot be reached is recorded as such (and
not called idle), never raised: the watch's real work is noticing lost machines.

What counts as a session: every line `who` prints — the utmp login records, i.e. interactive
logins on a terminal (ssh with a PTY, the console, mosh/tmux where they register). Commands run
over SSH without a terminal (gpuprov's own, `ssh host cmd`, scp) are not sessions: sshd writes no
utmp record for them. The simulated machines have no utmp: their SIMULATED `who`
(fakeclouds/who.py) lists the PTY sessions their SSH server has open.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import asyncssh
from temporalio.exceptions import ApplicationError

from activities import lease, machine_ssh, metrics
from activities.deps import ActivityDeps
from providers.base import CloudProvider
from providers.ssh_fleet import SshFleetProvider
from store import idle
from store.db import session_scope
from store.models import Instance, utcnow

log = logging.getLogger(__name__)

# Exit codes first, then nvidia-smi's lines, a marker, then who's lines. nvidia-smi's exit code 127
# (not installed) is a machine without GPUs: nothing there to be busy.
SAMPLE_COMMAND = ("u=$(nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits 2>/dev/null); "
                  "a=$?; "
                  "s=$(who 2>/dev/null); b=$?; echo \"$a $b\"; printf '%s\\n' \"$u\"; echo '--who--'; "
                  "printf '%s\\n' \"$s\"")
SAMPLE_TIMEOUT_S = 20.0  # one machine's login and command
CONNECT_TIMEOUT_S = 10.0
CONCURRENCY = 8  # machines sampled at once per connection
# A round's sampling ends within this (the watch's activity may run 60 s): machines not begun by then
# are not sampled this round — nothing recorded, their last sample stands — and come first next time.
ROUND_BUDGET_S = 30.0


@dataclass
class Reading:
    gpu_max_pct: float | None = None
    sessions: int | None = None
    error: str | None = None


def parse_sample(text: str) -> Reading:
    """SAMPLE_COMMAND's output; ValueError when it is not that."""
    head, _, rest = text.partition("\n")
    codes = head.split()
    if len(codes) != 2 or "--who--" not in rest:
        raise ValueError(f"unexpected sample output: {text[:200]!r}")
    smi_rc, who_rc = int(codes[0]), int(codes[1])
    gpu_text, _, who_text = rest.partition("--who--")
    if who_rc != 0:
        return Reading(error=f"`who` failed (exit {who_rc})")
    sessions = sum(1 for line in who_text.splitlines() if line.strip())
    if smi_rc == 127:
        return Reading(gpu_max_pct=None, sessions=sessions)
    if smi_rc != 0:
        return Reading(sessions=sessions, error=f"nvidia-smi failed (exit {smi_rc})")
    utils = []
    for line in gpu_text.splitlines():
        if line.strip():
            try:
                utils.append(float(line.strip().rstrip("%").strip()))
            except ValueError:
                why = f"nvidia-smi reports no utilisation ({line.strip()[:40]})"
                return Reading(sessions=sessions, error=why)
    return Reading(gpu_max_pct=max(utils) if utils else None, sessions=sessions)


async def _read(deps: ActivityDeps, p: CloudProvider, row: Instance) -> Reading:
    """One machine's sample, by the one SSH path (activities/machine_ssh.py): a fleet host through
    its bastion with its pinned key, a cloud machine held to the key pinned at its first login."""
    assert row.ssh_host is not None
    port, user = row.ssh_port or 22, row.ssh_user or "ubuntu"
    async with asyncio.timeout(SAMPLE_TIMEOUT_S):
        if isinstance(p, SshFleetProvider):
            bastion, host_key = p.ssh_route(row.ssh_host)
            r = machine_ssh.Route(bastion=bastion, host_key=host_key, addresses=p.addresses)
        else:
            r = await machine_ssh.route(deps, row.ssh_host, allocation_id=row.id)
        async with machine_ssh.connect(deps, row.ssh_host, port, user, r, CONNECT_TIMEOUT_S) as conn:
            # The machine's lease is renewed in the same command (activities/lease.py): no extra login.
            result = await conn.run(lease.command_for(p, row) + SAMPLE_COMMAND, check=False)
    if lease.NOT_RENEWED in str(result.stderr or ""):
        # The sample may still be good; the machine's dead-man switch is what is at risk.
        log.warning("the lease of %s could not be renewed on its machine", row.id)
        metrics.lease_not_renewed(row.provider)
    if result.exit_status != 0:
        return Reading(error=f"the sample command failed (exit {result.exit_status})")
    return parse_sample(str(result.stdout or ""))


async def sample(deps: ActivityDeps, p: CloudProvider, rows: Sequence[Instance],
                 budget_s: float = ROUND_BUDGET_S) -> dict[str, bool]:
    """Sample the rows' machines (bounded concurrency, least recently sampled first, those begun
    within `budget_s`) and store each; allocation id -> idle now, for those sampled."""
    gate = asyncio.Semaphore(CONCURRENCY)
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + budget_s

    def last_sampled() -> dict[str, float]:
        with session_scope(deps.engine) as session:
            got = {r.id: idle.get(session, r.id) for r in rows}
            return {a: m.sampled_at.timestamp() if m is not None else 0.0 for a, m in got.items()}

    order = await deps.blocking(last_sampled)
    rows = sorted(rows, key=lambda r: order[r.id])

    async def one(row: Instance) -> Reading | None:
        if row.ssh_host is None:
            return Reading(error="no SSH address known")
        async with gate:
            if loop.time() > stop_at:
                return None  # the round's time is up: next round
            try:
                return await _read(deps, p, row)
            except ApplicationError as e:  # a changed host key: nothing was sent; said so
                return Reading(error=f"sample refused: {e.message[:300]}")
            except (OSError, asyncssh.Error, TimeoutError, ValueError) as e:
                return Reading(error=f"sample failed: {type(e).__name__}: {str(e)[:200]}")

    readings = await asyncio.gather(*(one(r) for r in rows))

    def store() -> dict[str, bool]:
        now = utcnow()
        out = {}
        with session_scope(deps.engine) as session:
            jobs = idle.running_jobs(session, [r.id for r in rows])
            for row, rd in zip(rows, readings, strict=True):
                if rd is None:
                    continue
                saved = idle.record_sample(session, allocation_id=row.id, project=row.project, at=now,
                                           gpu_max_pct=rd.gpu_max_pct, sessions=rd.sessions,
                                           job_id=jobs.get(row.id), error=rd.error)
                out[row.id] = saved.idle_since is not None
        return out

    return await deps.blocking(store)
