"""The production stack file: the services the design names, one shared configuration, commands
that name things that exist, an image that copies every package and runs as a non-root user.
(tests/deploy/test_compose_processes.py runs those commands.)"""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def load() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def test_compose_has_the_production_services() -> None:
    services = load()["services"]
    assert {"postgresql", "temporal", "temporal-ui", "worker", "api"} <= set(services)


def test_workers_and_api_share_one_configuration_pointing_at_postgres_and_temporal() -> None:
    services = load()["services"]
    for name in ("worker", "api"):
        env = services[name]["environment"]
        assert env["GPUPROV_DATABASE_URL"].startswith("postgresql://")
        assert env["GPUPROV_TEMPORAL_ADDRESS"] == "temporal:7233"
        assert "temporal" in services[name]["depends_on"]
        # The identity is the database's: no process may bring its own.
        assert "GPUPROV_INSTALLATION_ID" not in env
        assert services[name]["volumes"] == ["gpuprov-home:/var/lib/gpuprov"]
    assert services["worker"]["command"][-1] == "worker.py"
    assert services["worker"]["deploy"]["replicas"] >= 2


def test_the_api_command_names_an_app_factory_that_exists() -> None:
    command = load()["services"]["api"]["command"]
    assert command[:2] == ["uvicorn", "--factory"]
    module, _, attr = command[2].partition(":")
    assert callable(getattr(importlib.import_module(module), attr))


def test_temporal_frontend_and_web_ui_are_not_published_on_every_interface() -> None:
    services = load()["services"]
    for name in ("temporal", "temporal-ui"):
        assert all(str(p).startswith("127.0.0.1:") for p in services[name].get("ports", [])), name


def test_secrets_are_required_not_defaulted() -> None:
    env = load()["services"]["api"]["environment"]
    # `${VAR:?msg}` makes compose refuse to start without the secret instead of running with a default one.
    assert ":?" in env["GPUPROV_SECRET_KEY"] and ":?" in env["GPUPROV_API_TOKEN"]


def test_dockerfile_copies_every_package_and_module_pyproject_installs() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for pattern in setuptools["packages"]["find"]["include"]:
        pkg = pattern.rstrip("*")
        assert f"COPY {pkg} {pkg}" in dockerfile, pkg
    copied = next(line for line in dockerfile.splitlines() if line.startswith("COPY worker.py"))
    for module in setuptools.get("py-modules", []):
        assert f"{module}.py" in copied, module


def test_the_image_runs_as_a_user_owning_its_home() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "USER gpuprov" in dockerfile and "--home-dir /var/lib/gpuprov" in dockerfile
    assert "GPUPROV_HOME=/var/lib/gpuprov" in dockerfile
