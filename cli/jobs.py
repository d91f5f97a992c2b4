"""Job commands: `gpuprov job run|ls|logs|cancel` — a command run on a machine allocated for it,
its output kept by the service and streamed back from any byte offset."""

from __future__ import annotations

import getpass
import sys
import time
from typing import Annotated

import httpx
import typer

from cli.client import API_PREFIX, Api, new_idempotency_key
from cli.output import fail, table
from messages.job import MAX_RESTARTS, JobStatus, JobType, RetryCause, RetryWhere
from messages.job_text import command_text, image_reference

app = typer.Typer(no_args_is_help=True, help="Managed jobs: run a command on a fresh machine.")

JobArg = Annotated[str, typer.Argument(help="the job id (`gpuprov job ls`)")]


@app.command()
def run(
    command: Annotated[str, typer.Argument(help="the shell command to run")],
    name: Annotated[str, typer.Option(help="the job's name")] = "job",
    type_: Annotated[JobType, typer.Option("--type", help="the workload type")] = JobType.TASK,
    gpu: Annotated[str | None, typer.Option(help="GPU name, e.g. H100 (none: any machine)")] = None,
    gpu_count: Annotated[int, typer.Option("--gpu-count", min=1)] = 1,
    cloud: Annotated[str | None, typer.Option(help="only this cloud (default: cheapest)")] = None,
    pool: Annotated[str | None, typer.Option(help="run on a free machine of this pool (not with --cloud); "
                                                  "the machine stays the pool's")] = None,
    image: Annotated[str | None, typer.Option(help="container image (run with docker where the host has it)")]
    = None,
    priority: Annotated[int, typer.Option(help="higher runs first")] = 0,
    max_price: Annotated[float | None, typer.Option("--max-price", help="at most this $/hr")] = None,
    requested_by: Annotated[str | None, typer.Option("--requested-by", help="default: your user name")]
    = None,
    retry_on: Annotated[list[RetryCause] | None, typer.Option(
        "--retry-on", help="run it again on a new machine when an attempt ends so (repeatable)")] = None,
    restarts: Annotated[int | None, typer.Option(
        "--restarts", min=0, max=MAX_RESTARTS, help="with --retry-on: at most this many restarts")] = None,
    retry_where: Annotated[RetryWhere, typer.Option(
        "--retry-where", help="with --retry-on: where a restart's machine may come from")]
    = RetryWhere.ANY_ALLOWED,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="stream its output until it ends")] = False,
) -> None:
    """Run COMMAND on a machine allocated for it; the machine is terminated when it ends. With
    --pool, on a free machine of the pool instead, left to the pool when it ends. With --retry-on
    and --restarts, an attempt that ends so (its machine preempted or lost, no capacity, a non-zero
    exit) runs again on a new machine, GPUPROV_JOB_ATTEMPT telling the command which attempt it is."""
    try:  # what the API refuses too (422): said before anything is sent
        command_text(command)
        if image is not None:
            image_reference(image)
    except ValueError as e:
        raise fail(str(e)) from None
    if bool(retry_on) != (restarts is not None):
        raise fail("--retry-on and --restarts go together")
    retry = None
    if retry_on and restarts is not None:
        retry = {"on": [c.value for c in dict.fromkeys(retry_on)], "restarts": restarts,
                 "where": retry_where.value}
    body = {"name": name, "type": type_.value, "command": command, "gpu": gpu,
            "gpu_count": gpu_count if pool is None or gpu is not None else None, "cloud": cloud, "pool": pool,
            "image": image, "priority": priority, "retry": retry,
            "max_price_per_hour": max_price, "requested_by": requested_by or getpass.getuser()}
    api = Api()
    job = api.call("POST", "/jobs", idempotency_key=new_idempotency_key(),
                   json={k: v for k, v in body.items() if v is not None})
    typer.echo(f"job {job['id']} {job['status']}")
    if follow:
        _follow(api, job["id"], 0)
        _exit_as(api, job["id"])


@app.command("ls")
def list_jobs() -> None:
    """The project's jobs, newest first."""
    rows = [[j["id"], j["name"], j["type"], j["status"], _gpu(j), str(j["exit_code"] if j["exit_code"]
                                                                      is not None else "-"),
             j["requested_by"], j["created_at"]] for j in Api().items("/jobs")]
    table(rows, ["ID", "NAME", "TYPE", "STATUS", "GPU", "EXIT", "REQUESTED BY", "CREATED"])


@app.command()
def logs(job_id: JobArg,
         follow: Annotated[bool, typer.Option("--follow", "-f", help="stream until the job ends")] = False,
         offset: Annotated[int, typer.Option(min=0, help="start at this byte")] = 0) -> None:
    """The job's output (stdout and stderr interleaved)."""
    api = Api()
    if follow:
        _follow(api, job_id, offset)
        _exit_as(api, job_id)
        return
    while True:  # every page of what is stored now
        r = _client(api).get(f"{API_PREFIX}/jobs/{job_id}/logs", params={"offset": offset})
        if r.status_code != 200:
            raise fail(f"{r.text} (HTTP {r.status_code})")
        sys.stdout.buffer.write(r.content)
        nxt = int(r.headers.get("X-Log-Offset", offset))
        if nxt == offset:
            return
        offset = nxt


@app.command()
def cancel(job_id: JobArg) -> None:
    """Cancel the job: a queued one leaves the queue, a running one stops; its machine is terminated."""
    job = Api().call("POST", f"/jobs/{job_id}/cancel")
    typer.echo(f"job {job['id']} {job['status']}")


def _gpu(job: dict[str, object]) -> str:
    return f"{job['gpu_count']}× {job['gpu']}" if job.get("gpu") else "-"


def _client(api: Api) -> httpx.Client:
    return api._client  # noqa: SLF001 — the same authenticated client, for a streamed body


def _follow(api: Api, job_id: str, offset: int) -> None:
    """Stream the output until the job ends; a dropped stream resumes where it broke off."""
    while True:
        try:
            with _client(api).stream("GET", f"{API_PREFIX}/jobs/{job_id}/logs",
                                     params={"offset": offset, "follow": "true"}, timeout=None) as r:
                if r.status_code != 200:
                    raise fail(f"{r.read().decode(errors='replace')} (HTTP {r.status_code})")
                for chunk in r.iter_bytes():
                    sys.stdout.buffer.write(chunk)
                    sys.stdout.buffer.flush()
                    offset += len(chunk)
            return
        except httpx.TransportError:
            time.sleep(1.0)


def _exit_as(api: Api, job_id: str) -> None:
    job = api.call("GET", f"/jobs/{job_id}")
    typer.echo(f"job {job_id} {job['status']}" + (f": {job['error']}" if job.get("error") else ""), err=True)
    if job["status"] != JobStatus.SUCCEEDED:
        raise typer.Exit(1)
