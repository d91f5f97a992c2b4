"""`gpuprov dev` (what `make run` runs): the Temporal dev server, the simulated clouds, the worker
and the API on this machine, with every simulated cloud connected. The simulation is its own
distribution (gpuprov-fakeclouds, ./fakeclouds): this is the one product module that imports it, and
only once it runs (the rest of the `gpuprov` command works without it).
Ctrl-C stops everything; state under $GPUPROV_HOME survives a restart."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import secrets
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import typer

from cli.output import reason
from cli.supervise import DevError, Supervisor, exit_after_clients, http_ok, temporal_up, worker_polling
from messages.enums import ConnectionStatus

TOKENS_FILE = "cloud-tokens.json"
SIMULATION_MISSING = (
    "gpuprov dev runs the embedded default with its simulated clouds, and those are a package of their "
    "own (gpuprov-fakeclouds) that is not installed here. From a checkout, `make run` installs it, or "
    "install it beside gpuprov with: pip install -e ./fakeclouds")


def simulation_installed() -> bool:
    return importlib.util.find_spec("fakeclouds") is not None


def _env_port(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


@dataclass
class DevConfig:
    home: Path
    api_port: int = 8000
    temporal_port: int = 7233
    ui_port: int = 8233
    cloud_port: int = 8765
    cloud_tls_port: int = 8766  # the same simulated clouds over TLS (for SDKs that talk only https)
    cloud_grpc_port: int = 8767  # the simulated gRPC clouds: plain text (Modal); TLS one port up (Nebius)
    cloud_grpc_tls_port: int = 8768
    worker_metrics_port: int = 8769  # the worker's Prometheus /metrics (0: off)
    boot_timeout_s: float = 60.0
    host: str = "127.0.0.1"
    # The simulated clouds' documented rate limits run at real speed (1.0); tests run them faster.
    cloud_time_scale: float = 1.0

    @classmethod
    def from_env(cls) -> DevConfig:
        from settings import Settings

        return cls(home=Settings().home.resolve(),
                   api_port=_env_port("GPUPROV_API_PORT", 8000),
                   temporal_port=_env_port("GPUPROV_TEMPORAL_PORT", 7233),
                   ui_port=_env_port("GPUPROV_TEMPORAL_UI_PORT", 8233),
                   cloud_port=_env_port("GPUPROV_LOCALCLOUD_PORT", 8765),
                   cloud_tls_port=_env_port("GPUPROV_LOCALCLOUD_TLS_PORT", 8766),
                   cloud_grpc_port=_env_port("GPUPROV_LOCALCLOUD_GRPC_PORT", 8767),
                   cloud_grpc_tls_port=_env_port("GPUPROV_LOCALCLOUD_GRPC_TLS_PORT", 8768),
                   worker_metrics_port=_env_port("GPUPROV_WORKER_METRICS_PORT", 8769),
                   boot_timeout_s=float(os.environ.get("GPUPROV_DEV_BOOT_TIMEOUT", "60")),
                   cloud_time_scale=float(os.environ.get("GPUPROV_DEV_CLOUD_TIME_SCALE", "1")))

    @property
    def api_url(self) -> str:
        return f"http://{self.host}:{self.api_port}"

    @property
    def ui_url(self) -> str:
        return f"http://{self.host}:{self.ui_port}"

    @property
    def codec_url(self) -> str:
        return f"{self.api_url}/codec"

    @property
    def cloud_url(self) -> str:
        return f"http://{self.host}:{self.cloud_port}"

    @property
    def cloud_tls_url(self) -> str:
        return f"https://{self.host}:{self.cloud_tls_port}"

    @property
    def cloud_grpc_url(self) -> str:
        return f"http://{self.host}:{self.cloud_grpc_port}"

    @property
    def cloud_grpc_tls_url(self) -> str:
        return f"https://{self.host}:{self.cloud_grpc_tls_port}"

    @property
    def worker_metrics_url(self) -> str:
        return f"http://{self.host}:{self.worker_metrics_port}/metrics"

    @property
    def temporal_address(self) -> str:
        return f"{self.host}:{self.temporal_port}"


# --------------------------------------------------------------------------- simulated clouds


def cloud_tokens(home: Path, clouds: list[str]) -> dict[str, str]:
    """A token for each simulated cloud, kept in home/cloud-tokens.json: stable across restarts
    (connections store them); a cloud added since the last start gets one, the others keep theirs."""
    path = home / TOKENS_FILE
    tokens: dict[str, str] = {}
    if path.exists():
        try:
            tokens = json.loads(path.read_text())
        except ValueError as e:
            raise DevError(f"{path} is not valid JSON ({e}); remove it to start over") from None
        if not isinstance(tokens, dict):
            raise DevError(f"{path} should hold an object of cloud id to token; remove it to start over")
    missing = [c for c in clouds if not tokens.get(c)]
    if missing or not path.exists():
        tokens.update({c: secrets.token_urlsafe(24) for c in missing})
        from settings import write_private

        write_private(path, json.dumps(tokens, indent=2, sort_keys=True) + "\n")
    return {c: tokens[c] for c in clouds}


def simulated_endpoints(cloud_url: str, clouds: list[str], tls_url: str | None = None,
                        grpc_url: str | None = None, grpc_tls_url: str | None = None) -> dict[str, str]:
    """Where each simulated cloud is served: its connection's endpoint, and the only prefixes the
    worker and the API allow besides documented hosts (GPUPROV_ALLOWED_ENDPOINTS) — never a whole
    loopback port shared with anything else (the API, Temporal and PostgreSQL listen there too). A
    facade whose SDK talks only https (`Facade.tls`) is served on `tls_url`; one whose API is gRPC
    (`Facade.grpc`: Nebius, Modal) at the gRPC listener, `grpc_url`, a port that serves nothing else
    (`grpc_tls_url`, its TLS port, for one whose SDK talks TLS: Nebius)."""
    from fakeclouds import clouds as sim

    def where(cloud: str) -> str:
        facade = sim.facade(cloud)
        if facade.grpc is not None:
            if (url := grpc_tls_url if facade.tls else grpc_url) is None:
                raise DevError(f"{cloud}'s simulation is served over gRPC{' with TLS' * facade.tls}: "
                               "no such gRPC listener given")
            return url
        return ((tls_url or cloud_url) if facade.tls else cloud_url) + facade.prefix

    return {cloud: where(cloud) for cloud in clouds}


def connection_bodies(cloud_url: str, tokens: dict[str, str], tls_url: str | None = None,
                      ca_pem: str | None = None, grpc_url: str | None = None,
                      grpc_tls_url: str | None = None) -> dict[str, dict[str, Any]]:
    """POST /connections bodies for every simulated cloud, from its facade (one served over TLS, HTTPS
    or gRPC, also carries the simulation's CA as its ca_bundle)."""
    from fakeclouds import clouds as sim

    bodies = {}
    endpoints = simulated_endpoints(cloud_url, list(tokens), tls_url, grpc_url, grpc_tls_url)
    for cloud, token in tokens.items():
        facade = sim.facade(cloud)
        bodies[cloud] = {"provider": cloud, "name": facade.display_name,
                         "credentials": facade.credentials(token), "endpoint": endpoints[cloud]}
        if facade.tls and ca_pem:
            bodies[cloud]["ca_bundle"] = ca_pem
    return bodies


async def _all_items(client: httpx.AsyncClient, path: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 200}
    while True:
        r = await client.get(path, params=params)
        r.raise_for_status()
        items += r.json()["items"]
        if not r.json().get("next_cursor"):
            return items
        params["cursor"] = r.json()["next_cursor"]


async def connect_simulated(c: httpx.AsyncClient, bodies: dict[str, dict[str, Any]]) -> None:
    """Connect each cloud of `bodies` not yet connected, through the API (so each is verified)."""
    have = {x["provider"] for x in await _all_items(c, "/connections")
            if x["status"] == ConnectionStatus.CONNECTED}
    for cloud, body in bodies.items():
        if cloud in have:
            continue
        r = await c.post("/connections", json=body)
        if r.status_code == 201:
            typer.echo(f"  connected {body['name']} ({r.json()['account']})")
        else:
            try:
                why = reason(r.json().get("detail"))
            except ValueError:  # not JSON: a proxy's page, a crash
                why = f"HTTP {r.status_code} {r.text[:200] or r.reason_phrase}"
            typer.secho(f"  could not connect {cloud}: {why}", fg=typer.colors.YELLOW)


def simulation_argv(cfg: DevConfig) -> list[str]:
    """The simulation server, serving every simulated cloud with its token from cloud-tokens.json
    (by file: an argument would show the tokens to every local user in the process list)."""
    return [sys.executable, "-m", "fakeclouds.server", "--host", cfg.host, "--port", str(cfg.cloud_port),
            "--tls-port", str(cfg.cloud_tls_port), "--grpc-port", str(cfg.cloud_grpc_port),
            "--grpc-tls-port", str(cfg.cloud_grpc_tls_port),
            "--state-dir", str(cfg.home / "localcloud"),
            "--tokens-file", str(cfg.home / TOKENS_FILE), "--time-scale", str(cfg.cloud_time_scale)]


# --------------------------------------------------------------------------- the supervisor


DEV_FLEET_NETWORKS = "127.0.0.0/8,::1/128"


def child_env(cfg: DevConfig, simulated: list[str]) -> dict[str, str]:
    """What every child is started with, beside this process's environment."""
    return {"GPUPROV_HOME": str(cfg.home), "GPUPROV_TEMPORAL_ADDRESS": cfg.temporal_address,
            "GPUPROV_API_URL": cfg.api_url, "GPUPROV_CODEC_CORS_ORIGINS": cfg.ui_url,
            # Adapters pace their calls at the speed the simulated clouds run their rate limits.
            "GPUPROV_CLOUD_TIME_SCALE": str(cfg.cloud_time_scale),
            "GPUPROV_WORKER_METRICS_PORT": str(cfg.worker_metrics_port),  # on 127.0.0.1: the default address
            "GPUPROV_ALLOWED_ENDPOINTS": ",".join(simulated_endpoints(
                cfg.cloud_url, simulated, cfg.cloud_tls_url, cfg.cloud_grpc_url,
                cfg.cloud_grpc_tls_url).values()),
            # Fleets of simulated hosts (fakeclouds/ssh.py) listen on 127.x.y.z: loopback allowed as a
            # fleet host here (the API's, Temporal's and the database's ports stay refused), unless
            # the environment says otherwise.
            "GPUPROV_FLEET_ALLOWED_NETWORKS": (os.environ.get("GPUPROV_FLEET_ALLOWED_NETWORKS")
                                               or DEV_FLEET_NETWORKS)}


async def run_dev(cfg: DevConfig) -> int:
    from api.deps import load_or_create_token
    from settings import Settings, private_home
    from store.db import make_engine
    from store.identity import installation_id
    from store.migrate import upgrade
    from store.secrets import load_or_create_key

    if not simulation_installed():
        typer.secho(f"error: {SIMULATION_MISSING}", fg=typer.colors.RED, err=True)
        return 1
    from fakeclouds import clouds as sim

    private_home(cfg.home)  # before anything is written there; every child inherits the umask
    load_or_create_key(cfg.home)
    token = load_or_create_token(cfg.home)
    settings = Settings(home=cfg.home)
    engine = make_engine(settings.resolved_database_url())
    upgrade(engine)  # the identity lives in the database: migrate before reading it
    inst_id = installation_id(engine, settings.installation_id, legacy_home=cfg.home)
    engine.dispose()
    simulated = sim.simulated()
    stack = Supervisor(cfg.home, child_env(cfg, simulated), boot_timeout_s=cfg.boot_timeout_s)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stack.stop_requested.set)

    bindir = Path(sys.executable).parent
    from cli import acceptance, dev_docker

    docker_svc = None
    dev_docker.allow_own_engine(cfg.home)  # before any child starts: they inherit it
    acceptance.write_worker_env(cfg.home, {**os.environ, **child_env(cfg, simulated)})
    typer.echo(f"gpuprov dev: home {cfg.home}, installation {inst_id}")
    try:
        tokens = cloud_tokens(cfg.home, simulated)
        # The simulation's TLS CA, made now in its state dir (the server reuses it), for the
        # connections of clouds whose SDK talks only https.
        from fakeclouds import tls

        ca_pem = tls.ensure(cfg.home / "localcloud", (cfg.host,)).ca_pem
        bodies = connection_bodies(cfg.cloud_url, tokens, cfg.cloud_tls_url, ca_pem,  # facades load
                                   cfg.cloud_grpc_url, cfg.cloud_grpc_tls_url)
        from workflows import dev_server
        from workflows.search_attributes import dev_server_args

        await stack.launch("temporal", [
            str(bindir / "temporal"), "server", "start-dev",
            "--db-filename", str(cfg.home / "temporal.db"), *dev_server.FLAGS,
            "--ip", cfg.host, "--port", str(cfg.temporal_port), "--ui-port", str(cfg.ui_port),
            "--ui-disable-news-fetch", "--log-level", "warn", *dev_server_args(),
            # The UI decodes payloads through the API's codec endpoint (no secret on this line: the
            # browser authenticates with a session cookie, see README "Payload encryption").
            "--ui-codec-endpoint", cfg.codec_url,
        ], lambda: temporal_up(cfg.temporal_address))
        await stack.launch("localcloud", simulation_argv(cfg),
                           lambda: http_ok(f"{cfg.cloud_url}/_fake/health"))
        await stack.launch("worker", [sys.executable, "-m", "cli", "worker"],
                           lambda: worker_polling(cfg.temporal_address, settings.task_queue))
        await stack.launch("api", [  # GPUPROV_API_WORKERS processes on one port (api/serve.py)
            sys.executable, "-m", "api.serve", "--host", cfg.host, "--port", str(cfg.api_port),
            "--log-level", "warning"], lambda: http_ok(f"{cfg.api_url}/healthz"))
        async with httpx.AsyncClient(base_url=cfg.api_url + "/api/compute", timeout=90,
                                     headers={"Authorization": f"Bearer {token}"}) as client:
            await connect_simulated(client, bodies)
            # Docker: a real engine, podman's where none answers (cli/dev_docker.py).
            docker_svc = await dev_docker.connect(client, cfg.home)
    except DevError as e:
        if not stack.stop_requested.is_set():
            typer.secho(f"error: {e}", fg=typer.colors.RED, err=True)
        typer.echo("stopping")
        stack.stop_all()
        dev_docker.stop(docker_svc)
        return 0 if stack.stop_requested.is_set() else 1

    worker_metrics = cfg.worker_metrics_url if cfg.worker_metrics_port else "off"
    example = f"gpuprov up --cloud {simulated[0]}" if simulated else "gpuprov connect <cloud> -c KEY=VALUE"
    typer.echo(f"""
  Console      {cfg.api_url}/studio/compute   (sign in with the token printed below)
  API          {cfg.api_url}   (docs {cfg.api_url}/docs)
  Web UI       {cfg.ui_url}   (Temporal; to decode payloads, open {cfg.codec_url}/ once)
  clouds       {cfg.cloud_url}, {cfg.cloud_tls_url}, {cfg.cloud_grpc_url} and {cfg.cloud_grpc_tls_url} (gRPC)
               simulated: {', '.join(simulated) or 'none'}
  Worker metrics {worker_metrics}   (the API's: {cfg.api_url}/metrics, admin token)
  logs         {cfg.home / 'logs'}
  API token    {token}

  export GPUPROV_TOKEN={token} GPUPROV_API_URL={cfg.api_url}
  {example:<29} # Ctrl-C here stops everything
""", nl=False)
    sys.stdout.flush()
    code = 0
    while not stack.stop_requested.is_set():
        dead = stack.first_dead()
        if dead is not None:
            typer.secho(f"error: {dead.name} exited with code {dead.exited()}; last lines of {dead.log}:\n"
                        f"{dead.tail()}", fg=typer.colors.RED, err=True)
            code = 1
            break
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stack.stop_requested.wait(), timeout=0.5)
    typer.echo("stopping: api, worker, localcloud, temporal")
    stack.stop_all()
    dev_docker.stop(docker_svc)
    typer.echo("stopped")
    return code


def dev() -> None:
    """Run everything locally: Temporal dev server, simulated clouds, worker and API."""
    exit_after_clients(asyncio.run(run_dev(DevConfig.from_env())))
