"""Job activities: record the job's row, wait for its machine, and run its command over SSH with the
output copied into the app database (store/jobs.py) as it arrives.

The remote side is idempotent, so a worker that dies mid-run neither loses the job nor starts it
twice: the command is started once, detached (setsid/nohup), under a per-job directory on the host
(`~/.gpuprov/jobs/<id>`: the command, its pid, its output, its exit code), guarded by an atomic
`mkdir`. A retried activity finds the directory, re-attaches, and reads the output from where the
database's copy ends (the heartbeat carries the same offset, for the Web UI).

A job with a retry policy runs in attempts, each on a new machine (workflows/job.py). From the second
on, the command's directory is the attempt's (`~/.gpuprov/jobs/<id>-<n>`: a fleet host given again
runs it afresh), its output is copied in after the marker line its record put in the one log (the
attempt's record on the job's row says where), and the command's environment says which attempt it
is (GPUPROV_JOB_ATTEMPT, GPUPROV_JOB_PREVIOUS_END: set with `env` or `docker run --env=`, values gpuprov
makes, quoted). A preemption notice sends SIGTERM to the command's process group (the detached
process is its leader and writes its pid) — every member but that leader, which stays to record the
command's exit code.

While the command runs, the same SSH connection samples the machine's GPUs with nvidia-smi every
`job_metrics_interval_s` (GPUPROV_JOB_METRICS_INTERVAL_S) into the app database (store/jobs.py
add_gpu_reading) for the Workload Queue's detail: metrics never enter workflow history, and a machine
whose nvidia-smi cannot answer is simply not sampled (the job runs on)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import shlex

import asyncssh
from temporalio import activity
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities import machine_ssh
from activities.deps import ActivityDeps, heartbeating
from messages import activities as acts
from messages import workflows as wf
from messages.allocation import AllocationState
from messages.enums import ErrorKind
from messages.job import (
    AdmitInput,
    AdmitResult,
    AllocationReadyInput,
    ClaimedMachine,
    ClaimInput,
    ClaimResult,
    JobStatus,
    MachineEndInput,
    RecordJobInput,
    RunJobInput,
    RunJobResult,
    SignalJobInput,
)
from messages.pool import slot_of_allocation
from store import jobs as job_store
from store import pool_claims, queue, spend
from store.db import session_scope
from store.models import Job, utcnow
from workflows import client_calls

READ_MAX = 1 << 20  # bytes read (and stored as one chunk) per poll
GPU_QUERY = "nvidia-smi --query-gpu=utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits"
GPU_QUERY_TIMEOUT_S = 15.0


def job_dir(run: str) -> str:
    return f"$HOME/.gpuprov/jobs/{run}"  # job ids are [a-z0-9] (and run keys `-<n>`): safe unquoted


def run_key(job_id: str, attempt: int = 1) -> str:
    """The command's directory (and container) name on the host: the job's id for its first attempt
    (as every job before retries), `<id>-<n>` for attempt n."""
    return job_id if attempt <= 1 else f"{job_id}-{int(attempt)}"


def attempt_env(inp: RunJobInput) -> list[str]:
    """The command's environment from gpuprov: `NAME=value` words, each quoted for the shell (the
    values are an int and a RetryCause: never user text)."""
    env = [f"GPUPROV_JOB_ATTEMPT={int(inp.attempt)}"]
    if inp.previous_end is not None:
        env.append(f"GPUPROV_JOB_PREVIOUS_END={inp.previous_end.value}")
    return [shlex.quote(e) for e in env]


def runner(inp: RunJobInput) -> str:
    """The script the detached process runs: in the image with `docker run` when one is named and
    the host has Docker, else the command directly. It records which in `mode`."""
    key = run_key(inp.job_id, inp.attempt)
    d = job_dir(key)
    env = attempt_env(inp)
    direct = f'echo direct > "{d}/mode"; exec env {" ".join(env)} bash "{d}/cmd.sh"'
    if not inp.image:
        return direct
    gpus = "--gpus all " if inp.gpus else ""
    envs = "".join(f"--env={e} " for e in env)  # one word each: `--env=NAME=value`, quoted
    # `--` ends docker's options: the image is never read as one (an image `--privileged` is an
    # image name, which docker refuses, not a flag). The API checks image references too.
    docker = (f'echo docker > "{d}/mode"; exec docker run --rm --name gpuprov-job-{key} {gpus}{envs}'
              f'-v "$HOME:$HOME" -w "$HOME" -- {shlex.quote(inp.image)} bash "{d}/cmd.sh"')
    return f"if command -v docker >/dev/null 2>&1; then {docker}; else {direct}; fi"


def launch_script(inp: RunJobInput) -> str:
    """Start the job once: a second run of this script (a retried activity) starts nothing. The
    guard is taken by the detached process itself, so a launch cut off with its SSH session either
    never started (and the retry starts it) or runs on regardless. Files are replaced by rename:
    a running command's script is never rewritten under it."""
    d = job_dir(run_key(inp.job_id, inp.attempt))
    detached = ('mkdir "$0/started" 2>/dev/null || exit 0; echo $$ > "$0/pid"; '
                'bash "$0/run.sh" > "$0/out" 2>&1; echo $? > "$0/exit.tmp"; mv "$0/exit.tmp" "$0/exit"')
    return "\n".join([
        f'mkdir -p "{d}"',
        f'if [ ! -e "{d}/started" ]; then',
        f'  printf "%s\\n" {shlex.quote(inp.command)} > "{d}/cmd.sh.new" && mv "{d}/cmd.sh.new" "{d}/cmd.sh"',
        f'  printf "%s\\n" {shlex.quote(runner(inp))} > "{d}/run.sh.new" && mv "{d}/run.sh.new" "{d}/run.sh"',
        f'  setsid nohup bash -c {shlex.quote(detached)} "{d}" < /dev/null > /dev/null 2>&1 &',
        "fi",
    ])


def read_command(run: str, offset: int) -> str:
    """The exit code (or `-` while it runs) on the first line, then output from byte `offset` (of the
    run's own output on the host). The exit file is looked at first: once it exists, the output read
    after it is complete."""
    d = job_dir(run)
    return (f'if [ -e "{d}/exit" ]; then cat "{d}/exit"; else echo -; fi; '
            f'tail -c +{offset + 1} "{d}/out" 2>/dev/null | head -c {READ_MAX}')


def parse_gpu_reading(text: str) -> list[tuple[float, int, int]]:
    """GPU_QUERY's answer: (utilisation %, memory used MiB, memory total MiB) per GPU, in order.
    ValueError on anything else (a field the GPU does not report: `[N/A]`)."""
    gpus = []
    for line in text.strip().splitlines():
        util, used, total = (f.strip() for f in line.split(","))
        gpus.append((float(util), int(float(used)), int(float(total))))
    return gpus


def kill_command(run: str) -> str:
    d = job_dir(run)
    return (f'docker rm -f gpuprov-job-{run} >/dev/null 2>&1; '
            f'[ -e "{d}/pid" ] && kill -TERM -- -"$(cat "{d}/pid")" 2>/dev/null; true')


# What signal_command's exit status says.
SIGNALLED, NOT_STARTED, EXITED = 0, 3, 4


def signal_command(run: str) -> str:
    """SIGTERM to the command: every process of the group its detached process leads (setsid), but
    not that leader, which waits for the command to record its exit code (a non-interactive bash
    would end on SIGTERM and record nothing). A docker command's `docker run` is in the group and
    passes the signal on to the container. Exit 3: not started here; 4: it had exited already."""
    d = job_dir(run)
    return (f'[ -e "{d}/pid" ] || exit {NOT_STARTED}; [ -e "{d}/exit" ] && exit {EXITED}; '
            f'pg=$(cat "{d}/pid"); '
            'ps -e -o pid= -o pgid= | while read -r p g; do '
            '[ "$g" = "$pg" ] && [ "$p" != "$pg" ] && kill -TERM "$p" 2>/dev/null; done; '
            f'exit {SIGNALLED}')


class JobActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self.deps = deps

    @activity.defn(name=acts.RECORD_JOB.name)
    def record_job(self, inp: RecordJobInput) -> None:
        with session_scope(self.deps.engine) as session:
            job_store.record(session, inp)
            pool_machine = slot_of_allocation(inp.allocation_id) is not None
            if inp.status == JobStatus.RUNNING and inp.allocation_id is not None and not pool_machine:
                # The machine's spend counts under the job's type, not as allocated by hand.
                job = session.get(Job, inp.job_id)
                if job is not None:
                    spend.set_job_type(session, inp.allocation_id, job.type)
                session.commit()

    @activity.defn(name=acts.ADMIT_JOB.name)
    def admit_job(self, inp: AdmitInput) -> AdmitResult:
        """The queue's grant, if the job's turn has come (store/queue.py: race-free admission)."""
        with session_scope(self.deps.engine) as session:
            return AdmitResult(granted=queue.admit(session, inp.job_id))

    @activity.defn(name=acts.CLAIM_POOL_MACHINE.name)
    def claim_pool_machine(self, inp: ClaimInput) -> ClaimResult:
        """A free ready machine of the pool, claimed for the job (store/pool_claims.py: race-free)."""
        with session_scope(self.deps.engine) as session:
            got = pool_claims.claim(session, inp.job_id, inp.pool_id)
            m = got.machine
            if m is None or m.ssh_host is None:
                return ClaimResult(gone=got.gone)
            return ClaimResult(machine=ClaimedMachine(
                allocation_id=m.id, host=m.ssh_host, port=m.ssh_port or 22, user=m.ssh_user or "ubuntu",
                gpus=bool(m.gpus_found) or bool(m.gpu)))

    @activity.defn(name=acts.AWAIT_MACHINE_END.name)
    async def await_machine_end(self, inp: MachineEndInput) -> str:
        """Wait (a long poll) until the pool machine's allocation workflow closes: why it went."""
        assert self.deps.client is not None, "ActivityDeps.client is required"
        handle = self.deps.client.get_workflow_handle(inp.workflow_id, result_type=AllocationState)
        try:
            st: AllocationState = await heartbeating(handle.result(),
                                                     inp.heartbeat_every_s, "machine up")
        except Exception as e:  # noqa: BLE001 — a failed or cancelled allocation: its reason
            return f"its allocation failed: {str(e)[:300]}"
        return f"{st.phase}: {st.error}" if st.error else f"{st.phase}"

    @activity.defn(name=acts.AWAIT_ALLOCATION_READY.name)
    async def await_allocation_ready(self, inp: AllocationReadyInput) -> AllocationState:
        """The allocation once ready (or ended): its `ready` update, a long poll; a workflow already
        closed answers its last state."""
        assert self.deps.client is not None, "ActivityDeps.client is required"
        client = self.deps.client
        try:
            return await heartbeating(client_calls.update(client, inp.workflow_id, wf.ALLOCATION.ready),
                                      inp.heartbeat_every_s, "ready?")
        except (RPCError, WorkflowUpdateFailedError) as e:
            if isinstance(e, RPCError) and e.status != RPCStatusCode.NOT_FOUND:
                raise
            return await client_calls.query(client, inp.workflow_id, wf.ALLOCATION.state)

    def _attempt_of(self, job_id: str, attempt: int) -> tuple[str | None, int]:
        """The job's machine (its allocation) and where the attempt's output starts in its log."""
        with session_scope(self.deps.engine) as session:
            job = session.get(Job, job_id)
            if job is None:
                return None, 0
            return job.allocation_id, job_store.output_start(job, attempt)

    @activity.defn(name=acts.RUN_JOB.name)
    async def run_job(self, inp: RunJobInput) -> RunJobResult:
        """Start the command (once) and copy its output into the job's log until it exits.

        The machine is reached by the one SSH path (activities/machine_ssh.py), found from the job's
        row here (its allocation: a fleet host's bastion and pin, a cloud machine's pin), so the
        workflow's input carries no route and older histories replay unchanged. A host key other
        than the pinned one fails the job (non-retryable) before anything is sent."""
        offset = await self.deps.blocking(self._log_end, inp.job_id)
        activity.heartbeat(offset)
        allocation_id, base = await self.deps.blocking(self._attempt_of, inp.job_id, inp.attempt)
        r = await machine_ssh.route(self.deps, inp.host, allocation_id=allocation_id)
        login = machine_ssh.connect(self.deps, inp.host, inp.port, inp.user, r)
        async with contextlib.AsyncExitStack() as stack:
            async with asyncio.timeout(120):
                conn = await heartbeating(stack.enter_async_context(login), inp.heartbeat_every_s, offset)
            return await self._attached(conn, inp, offset, base)
        raise AssertionError("unreachable")  # pragma: no cover — the block returns or raises

    @activity.defn(name=acts.SIGNAL_JOB.name)
    async def signal_job(self, inp: SignalJobInput) -> bool:
        """SIGTERM to the job's command on its machine (a preemption notice: signal_command), over
        the same SSH path as run_job. True when it was signalled; False when it was not running
        there (not started, or exited already)."""
        r = await machine_ssh.route(self.deps, inp.host, allocation_id=inp.allocation_id)
        async with asyncio.timeout(45), \
                machine_ssh.connect(self.deps, inp.host, inp.port, inp.user, r) as conn:
            got = await conn.run(signal_command(run_key(inp.job_id, inp.attempt)), check=False)
        if got.exit_status not in (SIGNALLED, NOT_STARTED, EXITED):
            raise RuntimeError(f"signalling the job's command failed (exit {got.exit_status}): "
                               f"{str(got.stderr or '')[-300:]}")
        return got.exit_status == SIGNALLED

    async def _attached(self, conn: asyncssh.SSHClientConnection, inp: RunJobInput,
                        offset: int, base: int) -> RunJobResult:
        """Launch (once) and copy the output into the log, the run's byte `offset - base` on the
        host being the log's byte `offset` (`base`: where this attempt's output starts in it)."""
        run = run_key(inp.job_id, inp.attempt)
        if offset < base:  # cannot be: the record that began the attempt wrote the log up to base
            raise RuntimeError(f"the job's log ends at {offset}, before its attempt's start {base}")
        try:
            started = await heartbeating(conn.run(launch_script(inp), check=False), inp.heartbeat_every_s,
                                         offset)
            if started.exit_status is None or started.exit_status < 0:
                # no exit status: the session was cut (a signal, a lost connection): try again
                raise RuntimeError(f"the job's launch was cut off: {str(started.stderr or '')[-300:]}")
            if started.exit_status != 0:
                # The launch script itself failed on the host (its input cannot be written or run
                # there): the same script fails the same way again, so the job ends with why, and
                # its machine is released (workflows/job.py), instead of retrying without end.
                raise ApplicationError(f"could not start the job (exit {started.exit_status}): "
                                       f"{str(started.stderr or '')[-300:]}",
                                       type=ErrorKind.JOB_LAUNCH_FAILED, non_retryable=True)
            clock = asyncio.get_running_loop().time
            interval = self.deps.job_metrics_interval_s
            next_sample = clock() if inp.gpus and interval > 0 else math.inf
            while True:
                if clock() >= next_sample:
                    ok = await heartbeating(self._sample(conn, inp.job_id), inp.heartbeat_every_s, offset)
                    next_sample = clock() + interval if ok else math.inf
                got = await heartbeating(conn.run(read_command(run, offset - base), check=False,
                                                  encoding=None), inp.heartbeat_every_s, offset)
                out = got.stdout if isinstance(got.stdout, bytes) else b""
                status, _, data = out.partition(b"\n")
                if data:
                    offset = await self.deps.blocking(self._append, inp.job_id, offset, data)
                activity.heartbeat(offset)
                if status.strip() not in (b"-", b"") and len(data) < READ_MAX:
                    break
                if len(data) < READ_MAX:
                    await asyncio.sleep(inp.poll_interval_s)
            exit_code = int(status.strip())
        except asyncio.CancelledError:
            if activity.is_worker_shutdown():
                raise  # only this worker stops: the command runs on, and a retry re-attaches
            # The job was cancelled: stop the command (its machine is terminated next anyway).
            with contextlib.suppress(Exception):
                async with asyncio.timeout(15):
                    await conn.run(kill_command(run), check=False)
            raise
        lines = await self.deps.blocking(self._last_lines, inp.job_id)
        return RunJobResult(exit_code=exit_code, last_lines=lines)

    async def _sample(self, conn: asyncssh.SSHClientConnection, job_id: str) -> bool:
        """Sample the machine's GPUs once into the job's metrics; False when nvidia-smi cannot
        answer (no more samples are asked of this machine by this attempt)."""
        try:
            async with asyncio.timeout(GPU_QUERY_TIMEOUT_S):
                got = await conn.run(GPU_QUERY, check=False)
            if got.exit_status != 0:
                raise ValueError(f"exit {got.exit_status}")
            gpus = parse_gpu_reading(str(got.stdout or ""))
        except (TimeoutError, ValueError, asyncssh.Error) as e:
            activity.logger.warning("job %s: no GPU metrics from nvidia-smi (%s)", job_id, str(e)[:200])
            return False
        if gpus:
            await self.deps.blocking(self._store_reading, job_id, gpus)
        return True

    def _store_reading(self, job_id: str, gpus: list[tuple[float, int, int]]) -> None:
        with session_scope(self.deps.engine) as session:
            job_store.add_gpu_reading(session, job_id, utcnow(), gpus)

    def _log_end(self, job_id: str) -> int:
        with session_scope(self.deps.engine) as session:
            return job_store.log_end(session, job_id)

    def _append(self, job_id: str, offset: int, data: bytes) -> int:
        """Store the output read at `offset`; the log's end after it (a stale attempt's overlapping
        write is dropped, and the reader carries on from the true end)."""
        with session_scope(self.deps.engine) as session:
            job_store.append_chunk(session, job_id, offset, data)
            return job_store.log_end(session, job_id)

    def _last_lines(self, job_id: str) -> list[str]:
        with session_scope(self.deps.engine) as session:
            return job_store.last_lines(session, job_id)
