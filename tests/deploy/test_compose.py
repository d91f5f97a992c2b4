"""The production stack file parses and wires the services the design names."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def load() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


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
    assert services["worker"]["command"][-1] == "worker.py"


def test_secrets_are_required_not_defaulted() -> None:
    env = load()["services"]["api"]["environment"]
    # `${VAR:?msg}` makes compose refuse to start without the secret instead of running with a default one.
    assert ":?" in env["GPUPROV_SECRET_KEY"] and ":?" in env["GPUPROV_API_TOKEN"]


def test_dockerfile_copies_every_package_the_services_import() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    for pkg in ("providers", "activities", "workflows", "api", "store"):
        assert f"COPY {pkg} {pkg}" in dockerfile
