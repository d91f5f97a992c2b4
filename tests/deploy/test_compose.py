"""The production stack file: the services the design names, one shared configuration, commands
that name things that exist, an image that copies every package and runs as a non-root user,
nothing published beyond the host's loopback, no secret on a command line.
(tests/deploy/test_compose_processes.py runs those commands.)"""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

from workflows import dev_server

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


def test_the_api_command_names_a_launcher_whose_app_factory_exists() -> None:
    command = load()["services"]["api"]["command"]
    assert command[:3] == ["python", "-m", "api.serve"]
    serve = importlib.import_module("api.serve")
    module, _, attr = serve.APP.partition(":")
    assert callable(serve.main) and callable(getattr(importlib.import_module(module), attr))


LOOPBACK = {"127.0.0.1", "::1", "[::1]", "localhost"}


def public_ports(service: dict[str, Any]) -> list[str]:
    """The service's published ports that bind beyond the host's loopback: a short form without a
    host IP ("8000:8000", "8000") or with a non-loopback one, a long form without a loopback
    `host_ip`, or the host's network itself."""
    found = ["network_mode: host"] if service.get("network_mode") == "host" else []
    for port in service.get("ports", []):
        if isinstance(port, dict):
            if port.get("published") is not None and port.get("host_ip") not in LOOPBACK:
                found.append(str(port))
            continue
        spec = str(port).split("/")[0]  # "127.0.0.1:8000:8000/tcp"
        host = spec.rsplit(":", 2)[0] if spec.count(":") >= 2 else None
        if host not in LOOPBACK:
            found.append(str(port))
    return found


# An argument naming a secret, interpolating a variable (the environment is where secrets go),
# or a long random-looking literal.
SECRET_WORD = re.compile(r"token|secret|passw|pwd|api[-_]?key|credential|private", re.I)
RANDOM_LITERAL = re.compile(r"^(?=.*\d)(?=.*[A-Za-z])[A-Za-z0-9_\-+/=]{24,}$")


def secret_looking(argv: Any) -> list[str]:
    args = argv.split() if isinstance(argv, str) else [str(a) for a in argv or []]
    return [a for a in args if SECRET_WORD.search(a) or "$" in a or RANDOM_LITERAL.match(a)]


def commands(service: dict[str, Any]) -> list[Any]:
    """Every argv compose runs for the service: its command, entrypoint and health check."""
    return [service.get("command"), service.get("entrypoint"), (service.get("healthcheck") or {}).get("test")]


def test_the_checks_below_catch_what_they_look_for() -> None:
    assert public_ports({"ports": ["8000:8000", "8000", "0.0.0.0:1:1", "127.0.0.1:2:2", "[::1]:3:3/tcp",
                                   {"target": 80, "published": 8080},
                                   {"target": 81, "published": 8081, "host_ip": "127.0.0.1"}]}) == [
        "8000:8000", "8000", "0.0.0.0:1:1", str({"target": 80, "published": 8080})]
    assert public_ports({"network_mode": "host"}) == ["network_mode: host"]
    assert secret_looking(["x", "--token", "${GPUPROV_API_TOKEN}", "Z-W-ia7vvBsNCu5mlChD9fI47UFHj-vU"]) == [
        "--token", "${GPUPROV_API_TOKEN}", "Z-W-ia7vvBsNCu5mlChD9fI47UFHj-vU"]
    assert secret_looking("psql postgresql://u:pw@db/x --password") == ["--password"]
    assert secret_looking(["python", "-m", "api.serve", "--port", "8000"]) == []


def test_nothing_is_published_beyond_the_hosts_loopback() -> None:
    # Temporal's frontend and Web UI have no auth at all; the API's token is better not sent over
    # a public interface in clear: a TLS proxy on the host publishes it (README: Security boundary).
    services = load()["services"]
    assert {name: public_ports(s) for name, s in services.items() if public_ports(s)} == {}
    assert {name for name, s in services.items() if s.get("ports")} >= {"temporal", "temporal-ui", "api"}


def test_no_secret_on_any_command_line() -> None:
    """Secrets reach the processes by environment (from .env); an argv is readable by every local user."""
    services = load()["services"]
    found = {name: secret_looking(argv) for name, s in services.items() for argv in commands(s)
             if secret_looking(argv)}
    assert found == {}
    dockerfile = (ROOT / "Dockerfile").read_text()
    for line in dockerfile.splitlines():
        if line.startswith(("CMD", "ENTRYPOINT")):
            assert secret_looking(line.split(maxsplit=1)[1]) == [], line
        if line.startswith("ENV"):  # an image's ENV is readable by anyone who can pull it
            assert not SECRET_WORD.search(line), line


def test_the_workers_metrics_off_loopback_come_with_the_admin_token() -> None:
    """A replica's /metrics listens on its container's address only because the admin token guards it
    (activities/metrics_http.py refuses such an address without one), and no host port publishes it."""
    env = load()["services"]["worker"]["environment"]
    assert (env["GPUPROV_WORKER_METRICS_ADDR"], env["GPUPROV_WORKER_METRICS_PORT"]) == ("0.0.0.0", "9464")
    assert ":?" in env["GPUPROV_API_TOKEN"]
    assert not any("9464" in str(p) for p in load()["services"]["worker"].get("ports", []))


def test_temporal_gets_the_embedded_dev_servers_dynamic_config() -> None:
    """docker-compose's Temporal reads the dynamic config `gpuprov dev`'s is started with
    (workflows/dev_server.FLAGS): one partition per task queue, no version check."""
    spec = load()
    temporal = spec["services"]["temporal"]
    [mount] = temporal["configs"]
    assert mount["target"] == f"/etc/temporal/{temporal['environment']['DYNAMIC_CONFIG_FILE_PATH']}"
    config = yaml.safe_load(spec["configs"][mount["source"]]["content"])
    dynamic = dev_server.dynamic_config()
    assert {key: [{"value": yaml.safe_load(value)}] for key, value in dynamic.items()} == config
    assert config["matching.numTaskqueueReadPartitions"] == [{"value": 1}]


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
