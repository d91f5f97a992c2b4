"""`gpuprov acceptance run|list|export`: the clouds page's acceptance suite on one connection.

`run` starts the run held after its plan, shows the offer, its price and the ceilings, and asks
before anything is created (`--yes` answers for CI; without a terminal to ask and without `--yes`
it refuses and the run ends with nothing made). For the worker-killed step it runs a worker of its
own on a private task queue (`python worker.py --private-queue ...`: no Schedules, no watches),
SIGKILLs that one while its allocation's create is in flight, starts a fresh one, and tells the run;
the deployment's workers are never touched. It needs the deployment's worker settings in its
environment (GPUPROV_DATABASE_URL, GPUPROV_SECRET_KEY or GPUPROV_HOME, GPUPROV_TEMPORAL_ADDRESS,
GPUPROV_ALLOWED_ENDPOINTS...); `gpuprov dev` writes them to $GPUPROV_HOME/worker.env, read here.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.client import Api
from cli.output import fail, table

app = typer.Typer(no_args_is_help=True, help="The acceptance suite: allocate, SSH, k3s + GPU, terminate, "
                                             "nothing billable left, interrupt-midway cleanup.")
ROOT = Path(__file__).resolve().parent.parent
WORKER_ENV_FILE = "worker.env"  # `gpuprov dev` writes its worker's settings here (no secret in it)
POLL_S = 0.25


def _echo_plan(plan: dict[str, Any], max_usd: float, max_minutes: float) -> None:
    gpu = f"{plan['gpu_count']}x {plan['gpu']}" if plan.get("gpu") else "no GPU"
    price = plan["price_per_hour"]
    typer.echo(f"offer: {plan['instance_type']} in {plan['region']} ({gpu}) at ${price:g}/h "
               f"on a {plan['account']} account")
    typer.echo(f"ceiling: ${max_usd:g} and {max_minutes:g} min (up to 4 machines, each only as long as its "
               f"step needs; at most ${min(max_usd, 4 * price * max_minutes / 60):.2f})")


def can_ask() -> bool:
    """Whether there is a person at a terminal to ask before spending."""
    return sys.stdin.isatty()


def _ask(yes: bool, cloud: str, max_usd: float) -> bool:
    if yes:
        return True
    if not can_ask():
        return False
    return typer.confirm(f"spend up to ${max_usd:g} on {cloud}?", default=False)


# Never written to worker.env: a secret stays where it is kept (the key file in the home, the token's).
SECRET_SETTINGS = frozenset({"GPUPROV_SECRET_KEY", "GPUPROV_TOKEN", "GPUPROV_API_TOKEN"})


def write_worker_env(home: Path, env: dict[str, str]) -> None:
    """The workers' settings (GPUPROV_*, no secret) as `gpuprov dev` runs them, for a worker started
    beside the stack: the acceptance runner's private one (worker_env reads them back)."""
    from settings import write_private

    lines = [f"{k}={v}" for k, v in sorted(env.items())
             if k.startswith("GPUPROV_") and k not in SECRET_SETTINGS and "\n" not in v]
    write_private(home / WORKER_ENV_FILE, "\n".join(lines) + "\n")


def worker_env() -> dict[str, str]:
    """This process's environment, under the settings `gpuprov dev` wrote for its workers."""
    from settings import Settings

    env = dict(os.environ)
    path = Settings().home / WORKER_ENV_FILE
    if path.is_file():
        for line in path.read_text().splitlines():
            name, sep, value = line.partition("=")
            if sep and name.startswith("GPUPROV_") and name not in env:
                env[name] = value
    return env


class WorkerProcess:
    """`python worker.py [args]` as a process of its own: started, SIGKILLed, restarted, stopped."""

    def __init__(self, log: Path, env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> None:
        self.log, self.args = log, args
        self.env = env  # None: this process's, under worker.env's settings (worker_env)
        self.proc: subprocess.Popen[bytes] | None = None

    def environment(self) -> dict[str, str]:
        return self.env or worker_env()

    def start(self) -> None:
        with self.log.open("ab") as out:
            argv = [sys.executable, str(ROOT / "worker.py"), *self.args]
            self.proc = subprocess.Popen(argv, cwd=ROOT, env=self.environment(), stdout=out,
                                         stderr=subprocess.STDOUT)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self, grace_s: float = 30) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.kill()


class PrivateWorker(WorkerProcess):
    """The run's own worker on a private task queue (`python worker.py --private-queue Q`), which
    the worker-killed step SIGKILLs and restarts. Its temporary files go to a directory of its own,
    removed when it is stopped: a SIGKILLed worker cannot remove what it wrote (an SDK adapter's CA
    bundle file), which would otherwise stay in the machine's temporary directory."""

    def __init__(self, queue: str, log: Path, env: dict[str, str] | None = None) -> None:
        super().__init__(log, env, ("--private-queue", queue))
        self.queue = queue
        self.temp = Path(tempfile.mkdtemp(prefix="gpuprov-acceptance-"))  # 0700

    def environment(self) -> dict[str, str]:
        return {**super().environment(), "TMPDIR": str(self.temp)}

    def stop(self, grace_s: float = 30) -> None:
        """SIGTERM (SIGKILL after `grace_s`), then its temporary directory removed."""
        super().stop(grace_s)
        shutil.rmtree(self.temp, ignore_errors=True)


def _phase_of(api: Api, instance_id: str) -> str | None:
    try:
        return str(api.call("GET", f"/instances/{instance_id}").get("phase") or "") or None
    except typer.Exit:
        return None


def _follow(api: Api, run_id: str, worker: PrivateWorker | None) -> dict[str, Any]:
    """Print each step as it ends; do the kill when the run asks; return the run once done."""
    shown = 0
    while True:
        run = api.call("GET", f"/acceptance-runs/{run_id}")
        for step in run["steps"][shown:]:
            detail = f" — {step['detail']}" if step.get("detail") else ""
            typer.echo(f"  {step['name']}: {step['outcome']} ({step['seconds']:.1f}s){detail}")
        shown = len(run["steps"])
        if run["done"]:
            return dict(run)
        if run.get("kill_now") and worker is not None:
            phase = _phase_of(api, run["kill_now"])
            worker.kill()
            typer.echo(f"  (SIGKILLed the private worker, {run['kill_now']} in phase {phase}; restarting it)")
            worker.start()
            api.call("POST", f"/acceptance-runs/{run_id}/worker-killed", json={"phase": phase})
        time.sleep(POLL_S)


def run(
    connection: Annotated[str, typer.Option("--connection", help="the connection (gpuprov connections)")],
    gpu: Annotated[str | None, typer.Option(help="the GPU (default: the cloud's cheapest offer)")] = None,
    instance_type: Annotated[str | None, typer.Option("--instance-type")] = None,
    region: Annotated[str | None, typer.Option()] = None,
    max_usd: Annotated[float, typer.Option("--max-usd", help="stop before its machines cost more")] = 5.0,
    max_minutes: Annotated[float, typer.Option("--max-minutes", help="stop after this long")] = 60.0,
    yes: Annotated[bool, typer.Option("--yes", help="spend without asking (CI)")] = False,
    kill_step: Annotated[bool, typer.Option("--kill-step/--no-kill-step",
                                            help="run the worker-killed step (a private worker)")] = True,
    json_out: Annotated[Path | None, typer.Option("--json", help="also write the result here")] = None,
) -> None:
    """Run the acceptance suite on one connection; exits 1 unless every step passed."""
    if not yes and not can_ask():
        raise fail("refusing to spend without --yes: there is no terminal to ask (nothing was started)")
    api = Api()
    worker: PrivateWorker | None = None
    body: dict[str, Any] = {"connection_id": connection, "gpu": gpu, "instance_type": instance_type,
                            "region": region, "max_usd": max_usd, "max_minutes": max_minutes, "spend": False}
    if kill_step:
        from settings import Settings

        queue = f"gpuprov-acceptance-{uuid.uuid4().hex[:12]}"
        worker = PrivateWorker(queue, Settings().home / f"{queue}.log")
        body["private_task_queue"] = queue
    started = api.call("POST", "/acceptance-runs", json=body)
    run_id = started["id"]
    typer.echo(f"acceptance run {run_id} on {started['cloud']} (connection {connection})")
    unanswered = True  # until its plan is answered, or it ended without one
    try:
        run_ = _await_plan(api, run_id)
        if run_["awaiting_approval"]:
            _echo_plan(run_["plan"], max_usd, max_minutes)
            if run_.get("approve_by") and not yes:
                typer.echo(f"answer by {run_['approve_by']}: unanswered, the run declines itself")
            go = _ask(yes, started["cloud"], max_usd)
            if go and worker is not None:
                worker.start()
            unanswered = False  # answered: a refusal (the run declined itself meanwhile) is the API's to say
            api.call("POST", f"/acceptance-runs/{run_id}/approve", json={"spend": go})
            if not go:
                typer.echo("not spending: the run ends with nothing created")
        unanswered = False
        final = _follow(api, run_id, worker)
    except BaseException:
        if unanswered:  # interrupted (Ctrl-C at the question): a held run would hold the account
            _decline(api, run_id)
        raise
    finally:
        if worker is not None:
            worker.stop()
    _report(final, json_out)


def _decline(api: Api, run_id: str) -> None:
    """End a run whose plan was never answered, with nothing created. A refusal (the API's reason is
    printed) is said, not raised over the interruption."""
    try:
        api.call("POST", f"/acceptance-runs/{run_id}/approve", json={"spend": False})
    except typer.Exit:
        typer.echo(f"acceptance run {run_id} was not declined: `gpuprov acceptance ls` shows it", err=True)
    else:
        typer.echo(f"acceptance run {run_id} declined: it ends with nothing created", err=True)


def _await_plan(api: Api, run_id: str) -> dict[str, Any]:
    while True:
        run_ = api.call("GET", f"/acceptance-runs/{run_id}")
        if run_["awaiting_approval"] or run_["done"]:
            return dict(run_)
        time.sleep(POLL_S)


def _report(run_: dict[str, Any], json_out: Path | None) -> None:
    for left in run_["leftovers"]:
        typer.secho(f"could not remove: {left['kind']} {left['cloud_id']} (key {left['key']}) — remove it "
                    "with the cloud's own console or CLI", fg=typer.colors.RED, err=True)
    if json_out is not None and run_.get("result") is not None:
        json_out.write_text(json.dumps(run_["result"], indent=2) + "\n")
    outcome = run_.get("outcome")
    typer.echo(f"acceptance {outcome}: {run_['cloud']} (spent about ${run_['spent_usd_estimate']:.2f})")
    if outcome != "passed":
        raise typer.Exit(1)


def list_runs() -> None:
    """The project's acceptance runs, newest first."""
    rows = [[r["id"], r["cloud"], r["outcome"] or ("running" if not r["done"] else "-"),
             str(r["created_at"] or "-")] for r in Api().items("/acceptance-runs")]
    table(rows, ["ID", "CLOUD", "OUTCOME", "STARTED"])


def export(cloud: Annotated[str | None, typer.Option(help="only this cloud's runs")] = None) -> None:
    """Every ended run's result as JSON, the committed results file's format
    (providers/acceptance_results.json): no credential, an account fingerprint at most."""
    params = {"cloud": cloud} if cloud else None
    typer.echo(json.dumps(Api().call("GET", "/acceptance-runs/results", params=params), indent=2))


app.command()(run)
app.command("ls")(list_runs)
app.command()(export)
