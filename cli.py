"""The `gpuprov` command: a thin HTTP client of the API (up, ls, offers, down, connect), the
worker, and `gpuprov dev`, which runs the whole service on this machine.

API URL from GPUPROV_API_URL (default http://127.0.0.1:8000); token from GPUPROV_TOKEN, else
GPUPROV_API_TOKEN, else $GPUPROV_HOME/api-token (written by `gpuprov dev`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import typer

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Provision GPU machines across clouds (Temporal workflows underneath).")

TERMINAL = {"ready", "failed", "terminated"}


def _poll_interval() -> float:
    return float(os.environ.get("GPUPROV_POLL_INTERVAL", "1.0"))


def _fail(message: str, code: int = 1) -> typer.Exit:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    return typer.Exit(code)


# --------------------------------------------------------------------------- API client


def _token() -> str:
    from settings import Settings

    token = os.environ.get("GPUPROV_TOKEN") or os.environ.get("GPUPROV_API_TOKEN")
    if token:
        return token.strip()
    path = Settings().home / "api-token"
    if path.exists():
        return path.read_text().strip()
    raise _fail(f"no API token: set GPUPROV_TOKEN or start `gpuprov dev` (which writes {path})")


def _reason(detail: Any) -> str:
    """FastAPI's `detail`: a string, or a list of validation errors with their field paths."""
    if isinstance(detail, list):
        parts = []
        for err in detail:
            loc = ".".join(str(p) for p in err.get("loc", []) if p != "body")
            parts.append(f"{loc}: {err.get('msg')}" if loc else str(err.get("msg")))
        return "; ".join(parts)
    return str(detail)


def http_client(base_url: str, token: str) -> httpx.Client:
    """The HTTP client every command uses (tests swap in one bound to the ASGI app)."""
    return httpx.Client(base_url=base_url, timeout=90, headers={"Authorization": f"Bearer {token}"})


class Api:
    def __init__(self, url: str | None = None, token: str | None = None) -> None:
        from settings import Settings

        self.url = (url or os.environ.get("GPUPROV_API_URL") or Settings().api_url).rstrip("/")
        self._client = http_client(self.url, token or _token())

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            r = self._client.request(method, "/api/compute" + path, **kwargs)
        except httpx.TransportError as e:
            raise _fail(f"cannot reach the gpuprov API at {self.url} ({e.__class__.__name__}) — "
                        "is `gpuprov dev` running? (GPUPROV_API_URL sets the address)") from None
        if r.status_code == 401:
            raise _fail("the API refused the token (GPUPROV_TOKEN / $GPUPROV_HOME/api-token)")
        if r.status_code >= 400:
            try:
                reason = _reason(r.json().get("detail", r.text))
            except ValueError:
                reason = r.text or r.reason_phrase
            raise _fail(f"{reason} (HTTP {r.status_code})")
        return r.json() if r.content else None


# --------------------------------------------------------------------------- output helpers


def _table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    for row in [header, *rows]:
        typer.echo("  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=False)).rstrip())


def _money(v: float | None) -> str:
    return f"${v:.2f}/h" if v is not None else "-"


def _ssh_command(inst: dict[str, Any]) -> str | None:
    ssh = inst.get("ssh")
    return f"ssh -p {ssh['port']} {ssh['user']}@{ssh['host']}" if ssh else None


def _print_attempt(a: dict[str, Any]) -> None:
    why = f" — {a['reason']}" if a.get("reason") else ""
    typer.echo(f"  attempt {a['seq']}: {a['provider']} {a['instance_type']} in {a['region']} "
               f"({_money(a['price_per_hour'])}{', spot' if a['spot'] else ''}): {a['outcome']}{why}")


def _follow(api: Api, instance_id: str, until: set[str], on_attempt: bool = True) -> dict[str, Any]:
    """Poll the instance, printing every status/phase transition (the recorded events, so a
    phase shorter than the poll interval is still shown) and new attempts, until `until`."""
    last_event = 0
    shown: dict[int, str] = {}  # attempt seq -> outcome already printed
    start = time.monotonic()
    while True:
        inst: dict[str, Any] = api.call("GET", f"/instances/{instance_id}")
        for ev in inst.get("events", []):
            if ev["id"] > last_event:
                typer.echo(f"[{time.monotonic() - start:6.1f}s] {ev['status']:<12} phase {ev['phase']}")
                last_event = ev["id"]
        if on_attempt:
            for a in inst["attempts"]:
                if shown.get(a["seq"]) != a["outcome"]:
                    _print_attempt(a)
                    shown[a["seq"]] = a["outcome"]
        if inst["status"] in until:
            return inst
        time.sleep(_poll_interval())


# --------------------------------------------------------------------------- commands


def _read_ssh_key(path: Path | None) -> str:
    ssh_dir = Path.home() / ".ssh"
    candidates = [path] if path else [ssh_dir / "id_ed25519.pub", ssh_dir / "id_rsa.pub"]
    for p in candidates:
        if p is not None and p.is_file():
            return p.read_text().strip()
    if path:
        raise _fail(f"SSH public key {path} not found")
    raise _fail("no SSH public key in ~/.ssh (id_ed25519.pub, id_rsa.pub): pass --ssh-key PATH, "
                "or create one with `ssh-keygen -t ed25519`")


@app.command()
def up(
    cloud: str = typer.Option(..., "--cloud", help="cloud id, e.g. local, lambda"),
    gpu: str | None = typer.Option(None, help="GPU name, e.g. H100, A10"),
    gpu_count: int | None = typer.Option(None, "--gpu-count", min=1),
    region: str | None = typer.Option(None),
    spot: bool = typer.Option(False, "--spot", help="spot/preemptible only"),
    port: list[int] = typer.Option([], "--port", help="open this port (repeatable)"),  # noqa: B006, B008
    image: str | None = typer.Option(None),
    no_k3s: bool = typer.Option(False, "--no-k3s", help="skip installing k3s"),
    ssh_key: Path | None = typer.Option(None, "--ssh-key",  # noqa: B008
                                        help="public key (default ~/.ssh/id_ed25519.pub, then id_rsa.pub)"),
    name: str | None = typer.Option(None),
    project: str = typer.Option("default"),
    detach: bool = typer.Option(False, "--detach", help="return once accepted"),
) -> None:
    """Allocate a machine and follow it until it is ready (or failed)."""
    api = Api()
    body = {"cloud": cloud, "gpu": gpu, "gpu_count": gpu_count, "region": region, "spot": spot or None,
            "ports": port, "image": image, "k3s": not no_k3s, "ssh_public_keys": [_read_ssh_key(ssh_key)],
            "name": name, "project": project}
    accepted = api.call("POST", "/instances", json={k: v for k, v in body.items() if v is not None})
    iid = accepted["id"]
    typer.echo(f"allocation {iid} accepted on {cloud}")
    if detach:
        return
    try:
        inst = _follow(api, iid, TERMINAL)
    except KeyboardInterrupt:
        typer.echo(f"\nstill provisioning in the background; `gpuprov down {iid}` stops it")
        raise typer.Exit(130) from None
    if inst["status"] != "ready":
        raise _fail(f"allocation {iid} {inst['status']}: {inst.get('error') or 'no reason recorded'}")
    gpus = ", ".join(g.get("name", "?") for g in inst["gpus"]) or "none"
    typer.echo(f"ready: {inst['instance_type']} in {inst['region']} at {_money(inst['price_per_hour'])}; "
               f"GPUs: {gpus}")
    if inst.get("note"):
        typer.echo(f"note: {inst['note']}")
    cmd = _ssh_command(inst)
    if cmd:
        typer.secho(cmd, bold=True)


@app.command("ls")
def list_instances(all_: bool = typer.Option(False, "--all", "-a", help="include terminated")) -> None:
    """List instances."""
    rows = []
    for i in Api().call("GET", "/instances"):
        if i["status"] == "terminated" and not all_:
            continue
        rows.append([i["id"], i["name"] or "-", i["cloud"], i["status"], i["phase"],
                     i["instance_type"] or "-", i["region"] or "-", _money(i["price_per_hour"]),
                     _ssh_command(i) or "-"])
    if not rows:
        typer.echo("no instances")
        return
    _table(rows, ["ID", "NAME", "CLOUD", "STATUS", "PHASE", "TYPE", "REGION", "PRICE", "SSH"])


@app.command()
def offers(
    cloud: str = typer.Option(..., "--cloud"),
    gpu: str | None = typer.Option(None),
    region: str | None = typer.Option(None),
    spot: bool | None = typer.Option(None, "--spot/--on-demand", help="only spot / only on-demand"),
) -> None:
    """Live offers of a connected cloud, cheapest first."""
    params = {k: v for k, v in {"gpu": gpu, "region": region, "spot": spot}.items() if v is not None}
    found = Api().call("GET", f"/backends/{cloud}/offers", params=params)
    if not found:
        typer.echo("no matching offers")
        return
    rows = []
    for o in found:
        g = o.get("gpu")
        gpu_label = "-"
        if g:
            memory = f" {g['memory_gib']:g}GB" if g.get("memory_gib") else ""
            gpu_label = f"{g['count']}x {g['name']}{memory}"
        rows.append([o["instance_type"], gpu_label, str(o["vcpus"]), f"{o['memory_gib']:g}GB", o["region"],
                     _money(o["price_per_hour"]), "spot" if o["spot"] else "",
                     "" if o["available"] else "no"])
    _table(rows, ["TYPE", "GPU", "VCPUS", "RAM", "REGION", "PRICE", "SPOT", "AVAIL"])


@app.command()
def down(instance_id: str, no_wait: bool = typer.Option(False, "--no-wait")) -> None:
    """Terminate an instance and wait until the cloud shows it gone."""
    api = Api()
    api.call("POST", f"/instances/{instance_id}/terminate")
    typer.echo(f"terminating {instance_id}")
    if no_wait:
        return
    inst = _follow(api, instance_id, {"terminated"}, on_attempt=False)
    typer.echo(f"{inst['id']} terminated")


@app.command()
def connect(
    provider: str,
    credential: list[str] = typer.Option([], "--credential", "-c",  # noqa: B006, B008
                                         help="KEY=VALUE (repeatable)"),
    endpoint: str | None = typer.Option(None, help="API endpoint override"),
    name: str | None = typer.Option(None),
) -> None:
    """Connect a cloud account; the credentials are verified before they are saved."""
    creds: dict[str, str] = {}
    for item in credential:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise _fail(f"--credential wants KEY=VALUE, got {item.split('=')[0]!r}...")
        creds[key] = value
    body = {"provider": provider, "credentials": creds, "endpoint": endpoint, "name": name}
    conn = Api().call("POST", "/connections", json={k: v for k, v in body.items() if v is not None})
    typer.echo(f"connected {conn['provider']} as {conn['account']} "
               f"(connection {conn['id']}, {conn['name']!r})")


@app.command()
def connections() -> None:
    """List cloud connections (never their secrets)."""
    rows = [[c["id"], c["provider"], c["name"], c["account"] or "-", c["status"]]
            for c in Api().call("GET", "/connections")]
    _table(rows, ["ID", "PROVIDER", "NAME", "ACCOUNT", "STATUS"]) if rows else typer.echo("no connections")


@app.command()
def worker() -> None:
    """Run the Temporal worker (migrates the database first)."""
    import worker as worker_module
    from store.migrate import upgrade

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    upgrade()
    try:
        asyncio.run(worker_module.main())
    except KeyboardInterrupt:
        pass


# --------------------------------------------------------------------------- gpuprov dev


def _env_port(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


@dataclass
class DevConfig:
    home: Path
    api_port: int = 8000
    temporal_port: int = 7233
    ui_port: int = 8233
    cloud_port: int = 8765
    boot_timeout_s: float = 60.0
    host: str = "127.0.0.1"

    @classmethod
    def from_env(cls) -> DevConfig:
        from settings import Settings

        return cls(home=Settings().home.resolve(),
                   api_port=_env_port("GPUPROV_API_PORT", 8000),
                   temporal_port=_env_port("GPUPROV_TEMPORAL_PORT", 7233),
                   ui_port=_env_port("GPUPROV_TEMPORAL_UI_PORT", 8233),
                   cloud_port=_env_port("GPUPROV_LOCALCLOUD_PORT", 8765),
                   boot_timeout_s=float(os.environ.get("GPUPROV_DEV_BOOT_TIMEOUT", "60")))

    @property
    def api_url(self) -> str:
        return f"http://{self.host}:{self.api_port}"

    @property
    def cloud_url(self) -> str:
        return f"http://{self.host}:{self.cloud_port}"

    @property
    def temporal_address(self) -> str:
        return f"{self.host}:{self.temporal_port}"


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _cloud_tokens(home: Path) -> dict[str, str]:
    """Tokens of the simulated clouds: stable across restarts, since connections store them."""
    path = home / "cloud-tokens.json"
    if not path.exists():
        _write_private(path, json.dumps({f: secrets.token_urlsafe(24) for f in ("local", "lambda")}))
    tokens: dict[str, str] = json.loads(path.read_text())
    return tokens


def _die_with_parent() -> None:
    """preexec_fn: the child gets SIGTERM if `gpuprov dev` itself is killed (Linux)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


@dataclass
class Child:
    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self, env: dict[str, str]) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            # Own session: a terminal Ctrl-C reaches only `gpuprov dev`, which stops children in order.
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         preexec_fn=_die_with_parent)

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class DevError(Exception):
    pass


@dataclass
class DevStack:
    cfg: DevConfig
    children: list[Child] = field(default_factory=list)
    stop_requested: asyncio.Event = field(default_factory=asyncio.Event)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(GPUPROV_HOME=str(self.cfg.home), GPUPROV_TEMPORAL_ADDRESS=self.cfg.temporal_address,
                   GPUPROV_API_URL=self.cfg.api_url, PYTHONUNBUFFERED="1")
        return env

    async def launch(self, name: str, argv: list[str], healthy: Callable[[], Any]) -> Child:
        child = Child(name, argv, self.cfg.home / "logs" / f"{name}.log")
        child.start(self.env())
        self.children.append(child)
        deadline = time.monotonic() + self.cfg.boot_timeout_s
        while True:
            if self.stop_requested.is_set():
                raise DevError("interrupted")
            if child.exited() is not None:
                raise DevError(f"{name} exited with code {child.exited()} during start; "
                               f"last lines of {child.log}:\n{child.tail()}")
            try:
                if await healthy():
                    break
            except Exception:  # noqa: BLE001 — not up yet
                pass
            if time.monotonic() > deadline:
                raise DevError(f"{name} not healthy after {self.cfg.boot_timeout_s:g}s; see {child.log}")
            await asyncio.sleep(0.2)
        typer.echo(f"  {name:<9} up (pid {child.proc.pid if child.proc else '?'})")
        return child

    def stop_all(self) -> None:
        for child in reversed(self.children):
            child.stop()
        self.children.clear()


async def _http_ok(url: str, token: str | None = None) -> bool:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(timeout=2) as c:
        return (await c.get(url, headers=headers)).status_code == 200


async def _worker_polling(address: str, task_queue: str) -> bool:
    """Healthy = the worker is polling our task queue (so a workflow started now will run)."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
    from temporalio.client import Client

    client = await Client.connect(address)
    resp = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
        namespace="default", task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW))
    return len(resp.pollers) > 0


async def _temporal_up(address: str) -> bool:
    from temporalio.client import Client

    client = await Client.connect(address)
    return bool(await client.service_client.check_health())


async def _auto_connect(cfg: DevConfig, token: str, cloud_tokens: dict[str, str]) -> None:
    """Connect `local` and a simulated `lambda` through the API (so they are verified) once."""
    wanted = {
        "local": {"provider": "local", "name": "local", "credentials": {"api_key": cloud_tokens["local"]},
                  "endpoint": f"{cfg.cloud_url}/local/v1"},
        "lambda": {"provider": "lambda", "name": "lambda (simulated)",
                   "credentials": {"api_key": cloud_tokens["lambda"]},
                   "endpoint": f"{cfg.cloud_url}/lambda/api/v1"},
    }
    async with httpx.AsyncClient(base_url=cfg.api_url + "/api/compute", timeout=90,
                                 headers={"Authorization": f"Bearer {token}"}) as c:
        have = {x["provider"] for x in (await c.get("/connections")).json() if x["status"] == "connected"}
        for provider, body in wanted.items():
            if provider in have:
                continue
            r = await c.post("/connections", json=body)
            if r.status_code == 201:
                typer.echo(f"  connected {body['name']} ({r.json()['account']})")
            else:
                typer.secho(f"  could not connect {provider}: {_reason(r.json().get('detail'))}",
                            fg=typer.colors.YELLOW)


async def run_dev(cfg: DevConfig) -> int:
    from api.deps import load_or_create_token
    from settings import Settings
    from store.identity import installation_id
    from store.migrate import upgrade
    from store.secrets import load_or_create_key

    cfg.home.mkdir(parents=True, exist_ok=True)
    load_or_create_key(cfg.home)
    token = load_or_create_token(cfg.home)
    inst_id = installation_id(cfg.home)
    cloud_tokens = _cloud_tokens(cfg.home)
    settings = Settings(home=cfg.home)
    stack = DevStack(cfg)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stack.stop_requested.set)

    bindir = Path(sys.executable).parent
    typer.echo(f"gpuprov dev: home {cfg.home}, installation {inst_id}")
    try:
        from workflows.search_attributes import dev_server_args

        await stack.launch("temporal", [
            str(bindir / "temporal"), "server", "start-dev",
            "--db-filename", str(cfg.home / "temporal.db"),
            "--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=NORMAL",
            "--ip", cfg.host, "--port", str(cfg.temporal_port), "--ui-port", str(cfg.ui_port),
            "--ui-disable-news-fetch", "--log-level", "warn", *dev_server_args(),
        ], lambda: _temporal_up(cfg.temporal_address))
        token_arg = ",".join(f"{k}={v}" for k, v in cloud_tokens.items())
        await stack.launch("localcloud", [
            sys.executable, "-m", "fakeclouds.server", "--host", cfg.host, "--port", str(cfg.cloud_port),
            "--state-dir", str(cfg.home / "localcloud"), "--token", token_arg,
        ], lambda: _http_ok(f"{cfg.cloud_url}/_fake/health"))
        upgrade(settings.resolved_database_url())
        await stack.launch("worker", [sys.executable, "-m", "cli", "worker"],
                           lambda: _worker_polling(cfg.temporal_address, settings.task_queue))
        await stack.launch("api", [
            sys.executable, "-m", "uvicorn", "--factory", "api.app:build_app", "--host", cfg.host,
            "--port", str(cfg.api_port), "--log-level", "warning",
        ], lambda: _http_ok(f"{cfg.api_url}/healthz"))
        await _auto_connect(cfg, token, cloud_tokens)
    except DevError as e:
        if not stack.stop_requested.is_set():
            typer.secho(f"error: {e}", fg=typer.colors.RED, err=True)
        typer.echo("stopping")
        stack.stop_all()
        return 0 if stack.stop_requested.is_set() else 1

    typer.echo(f"""
  API          {cfg.api_url}   (docs {cfg.api_url}/docs)
  Web UI       http://{cfg.host}:{cfg.ui_port}   (Temporal)
  local cloud  {cfg.cloud_url}/local/v1
  logs         {cfg.home / 'logs'}
  API token    {token}

  export GPUPROV_TOKEN={token} GPUPROV_API_URL={cfg.api_url}
  gpuprov up --cloud local      # Ctrl-C here stops everything
""", nl=False)
    sys.stdout.flush()
    code = 0
    while not stack.stop_requested.is_set():
        dead = next((c for c in stack.children if c.exited() is not None), None)
        if dead is not None:
            typer.secho(f"error: {dead.name} exited with code {dead.exited()}; last lines of {dead.log}:\n"
                        f"{dead.tail()}", fg=typer.colors.RED, err=True)
            code = 1
            break
        try:
            await asyncio.wait_for(stack.stop_requested.wait(), timeout=0.5)
        except TimeoutError:
            pass
    typer.echo("stopping: api, worker, localcloud, temporal")
    stack.stop_all()
    typer.echo("stopped")
    return code


@app.command()
def dev() -> None:
    """Run everything locally: Temporal dev server, simulated clouds, worker and API."""
    raise typer.Exit(asyncio.run(run_dev(DevConfig.from_env())))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
