"""A real Docker Engine API for the `docker` tests: DOCKER_HOST or the default socket when an engine
answers there, else Debian's podman serving one on a socket of this session's own
(providers/docker_engine.py), stopped, with every container in its storage, at the session's end.

The engine starts only when a test asks for `docker_engine_url`, which needs `module_processes`: those
tests are in the `processes` tier (tests/tiers.py), never in `make test-fast`. The first session on a
machine pays the image build (mmdebstrap, about 40 s; cached under ~/.cache/gpuprov/engine) and,
where podman is missing, its install (about 45 s).

A plugin of the whole suite (tests/conftest.py's `pytest_plugins`), not tests/docker_'s conftest: the
session's one engine is shared with the Docker crash test (tests/crash/test_docker_crash.py) — a
session fixture defined twice would be two engines, each importing the image.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from providers import docker_engine
from providers.docker_ import HOSTS_SETTING
from tests.docker_.fault_proxy import FaultProxy


@dataclass
class Engine:
    base_url: str  # the engine's own socket
    service: docker_engine.PodmanService | None  # None: an engine that was already running


@pytest.fixture(scope="session")
def _docker_engine_session(machine_ready: None) -> Iterator[Engine]:
    existing = docker_engine.existing_engine()
    if existing is not None:
        yield Engine(existing, None)
        return
    home = Path(tempfile.mkdtemp(prefix="gpuprov-docker-"))
    try:
        svc = docker_engine.start_own(home)
    except docker_engine.EngineUnavailable as exc:
        shutil.rmtree(home, ignore_errors=True)
        pytest.fail(f"no Docker Engine API here and none could be started: {exc}")
    try:
        yield Engine(svc.base_url, svc)
    finally:
        svc.stop()
        shutil.rmtree(home, ignore_errors=True)


def allow(url: str) -> pytest.MonkeyPatch:
    """Let connections name `url` (providers/docker_.py: GPUPROV_DOCKER_HOSTS); undo() forgets it."""
    mp = pytest.MonkeyPatch()
    known = [h for h in os.environ.get(HOSTS_SETTING, "").split(",") if h]
    mp.setenv(HOSTS_SETTING, ",".join([*known, url]))
    return mp


@pytest.fixture(scope="module")
def docker_engine_url(module_processes: None, _docker_engine_session: Engine) -> Iterator[str]:
    mp = allow(_docker_engine_session.base_url)
    yield _docker_engine_session.base_url
    mp.undo()


@pytest.fixture(scope="module")
def fault_proxy(docker_engine_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultProxy]:
    listen = Path(tempfile.mkdtemp(prefix="gpd-proxy-")) / "p.sock"
    proxy = FaultProxy(docker_engine_url, listen).start()
    mp = allow(proxy.base_url)
    try:
        yield proxy
    finally:
        mp.undo()
        proxy.stop()
        shutil.rmtree(listen.parent, ignore_errors=True)
