"""`make run`'s Docker: the engine that answers at DOCKER_HOST or the default socket, else Debian's
podman serving one on a socket of its own (`engine_home`; providers/docker_engine.py), stopped with
the rest; then the Docker connection, made through the API like every other (so it is verified).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
from pathlib import Path

import httpx
import typer

from providers import docker_engine
from providers.docker_ import HOSTS_SETTING, DockerProvider


def engine_home(home: Path) -> Path:
    """Where this run's podman keeps its storage and socket: beside the image cache, one per
    GPUPROV_HOME, not under it (an image's root file system is readable by others, as it must be;
    GPUPROV_HOME holds nothing that is), and kept across runs so the image is imported once."""
    digest = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:12]
    return docker_engine.cache_dir() / "engines" / digest


HOME_FILE = "gpuprov-home"  # in an engine's directory: the GPUPROV_HOME it serves


def prune_engines() -> None:
    """Remove the engine directories (storage with its imported image, about 200 MB) of homes that no
    longer exist (a test's temporary home, a deleted one), when no engine answers on their socket."""
    root = docker_engine.cache_dir() / "engines"
    for where in root.glob("*") if root.is_dir() else ():
        marker = where / HOME_FILE
        if not marker.is_file() or Path(marker.read_text().strip()).exists():
            continue
        svc = docker_engine.PodmanService(where)
        if docker_engine.ping(svc.base_url):
            continue
        shutil.rmtree(where, ignore_errors=True)
        shutil.rmtree(svc.runroot, ignore_errors=True)


def _start_own(home: Path) -> docker_engine.PodmanService:
    prune_engines()
    where = engine_home(home)
    where.mkdir(parents=True, exist_ok=True)
    (where / HOME_FILE).write_text(str(home.resolve()))
    return docker_engine.start_own(where)


def allow_own_engine(home: Path) -> None:
    """Before the children start (they inherit this environment): let connections name the engine
    this run may start, under `home` (providers/docker_.py, GPUPROV_DOCKER_HOSTS)."""
    own = docker_engine.PodmanService(engine_home(home)).base_url
    known = [h for h in os.environ.get(HOSTS_SETTING, "").split(",") if h]
    os.environ[HOSTS_SETTING] = ",".join(dict.fromkeys([*known, own]))


async def start_engine(home: Path) -> tuple[str | None, docker_engine.PodmanService | None]:
    """The engine's URL and the service we started (None: one was already running, or none could
    start: then a warning says why, and the rest of `make run` goes on without Docker)."""
    existing = docker_engine.existing_engine()
    if existing is not None:
        return existing, None
    typer.echo("  no Docker engine answers: starting podman (first start installs it and builds the image)")
    try:
        svc = await asyncio.to_thread(_start_own, home)
    except docker_engine.EngineUnavailable as exc:
        typer.secho(f"  Docker not connected: {exc}", fg=typer.colors.YELLOW)
        return None, None
    return svc.base_url, svc


async def connect(client: httpx.AsyncClient, home: Path) -> docker_engine.PodmanService | None:
    """Start (or find) the engine and connect Docker to it, unless already connected."""
    url, svc = await start_engine(home)
    if url is None:
        return None
    try:
        await _connect(client, url)
    except BaseException:
        stop(svc)
        raise
    return svc


async def _connect(client: httpx.AsyncClient, url: str) -> None:
    r = await client.get("/connections", params={"limit": 200})
    r.raise_for_status()
    if any(c["provider"] == DockerProvider.id and c.get("status") == "connected" for c in r.json()["items"]):
        return
    body = {"provider": DockerProvider.id, "name": DockerProvider.capabilities.display_name,
            "credentials": {"docker_host": url}}
    r = await client.post("/connections", json=body)
    if r.status_code == 201:
        typer.echo(f"  connected Docker ({r.json()['account']})")
    else:
        typer.secho(f"  could not connect Docker: HTTP {r.status_code} {r.text[:300]}",
                    fg=typer.colors.YELLOW)


def stop(svc: docker_engine.PodmanService | None) -> None:
    if svc is not None:
        svc.stop()
