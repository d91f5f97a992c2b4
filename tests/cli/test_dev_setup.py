"""What `gpuprov dev` derives from the simulation's list of clouds: a token per simulated cloud, the
simulation server's arguments, and one verified connection per simulated cloud (no process is
started here); and what it says when the simulation is not installed."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from api.deps import AppDeps
from cli import dev
from fakeclouds import clouds
from fakeclouds.facade import Facade
from providers.endpoints import parse_prefixes
from providers.fleet_addresses import AddressRefused, FleetAddresses
from settings import Settings
from tests.api.conftest import GOOD_KEY, app_serving
from tests.cli.conftest import TOKEN, FakeInstantWorkflows


def facade(name: str, prefix: str) -> Facade:
    return Facade(name=name, prefix=prefix, display_name=f"{name} (simulated)",
                  build_router=lambda engine, token: None,  # type: ignore[arg-type,return-value]
                  credentials=lambda token: {"api_key": token}, login_user="root", regions=(),
                  instance_types=())


@pytest.fixture
def simulated(monkeypatch: pytest.MonkeyPatch) -> dict[str, Facade]:
    """The simulated clouds, as the fakeclouds facades will declare them."""
    facades = {"fakecloud": facade("fakecloud", "/fake/v1"), "othersim": facade("othersim", "/other/api")}
    monkeypatch.setattr(clouds, "simulated", lambda: list(facades))
    monkeypatch.setattr(clouds, "facade", lambda cloud: facades[cloud])
    return facades


def test_a_token_per_simulated_cloud_kept_across_starts(tmp_path: Path) -> None:
    first = dev.cloud_tokens(tmp_path, ["a", "b"])
    path = tmp_path / dev.TOKENS_FILE
    assert set(first) == {"a", "b"} and all(len(t) >= 24 for t in first.values())
    assert first["a"] != first["b"] and (path.stat().st_mode & 0o777) == 0o600
    assert dev.cloud_tokens(tmp_path, ["a", "b"]) == first
    # A cloud registered since: it gets a token, the others keep theirs.
    later = dev.cloud_tokens(tmp_path, ["a", "b", "c"])
    assert {k: later[k] for k in ("a", "b")} == first and later["c"] not in first.values()
    assert json.loads(path.read_text()) == later and (path.stat().st_mode & 0o777) == 0o600
    # A cloud no longer simulated keeps its token in the file (a later start may need it again).
    assert dev.cloud_tokens(tmp_path, ["c"]) == {"c": later["c"]}
    assert set(json.loads(path.read_text())) == {"a", "b", "c"}


async def test_without_the_simulation_installed_dev_says_how_to_install_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "fakeclouds", None)  # as if gpuprov-fakeclouds were not installed
    assert await dev.run_dev(dev.DevConfig(home=tmp_path / "home")) == 1
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "pip install -e ./fakeclouds" in err and "make run" in err
    assert not (tmp_path / "home").exists()  # said before anything was started or written


def test_a_broken_tokens_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / dev.TOKENS_FILE).write_text("{not json")
    with pytest.raises(dev.DevError, match="remove it to start over"):
        dev.cloud_tokens(tmp_path, ["a"])


def test_server_and_connections_come_from_the_facades(tmp_path: Path, simulated: dict[str, Facade]) -> None:
    cfg = dev.DevConfig(home=tmp_path, cloud_port=9999)
    tokens = dev.cloud_tokens(tmp_path, clouds.simulated())
    argv = dev.simulation_argv(cfg)
    assert argv[1:3] == ["-m", "fakeclouds.server"]
    # The tokens go by their private file, never on the command line (every local user can read that).
    assert argv[argv.index("--tokens-file") + 1] == str(tmp_path / dev.TOKENS_FILE)
    assert "--token" not in argv and not any(t in " ".join(argv) for t in tokens.values())
    bodies = dev.connection_bodies(cfg.cloud_url, tokens)
    assert bodies["othersim"] == {"provider": "othersim", "name": "othersim (simulated)",
                                  "credentials": {"api_key": tokens["othersim"]},
                                  "endpoint": "http://127.0.0.1:9999/other/api"}


def test_the_worker_and_api_allow_exactly_the_simulated_clouds(tmp_path: Path,
                                                              simulated: dict[str, Facade]) -> None:
    cfg = dev.DevConfig(home=tmp_path, api_port=8111, temporal_port=7222, cloud_port=9999)
    env = dev.child_env(cfg, clouds.simulated())
    # Each simulated cloud's own prefix: not the whole port, and never the API's or Temporal's.
    assert env["GPUPROV_ALLOWED_ENDPOINTS"] == "http://127.0.0.1:9999/fake/v1,http://127.0.0.1:9999/other/api"
    assert parse_prefixes(env["GPUPROV_ALLOWED_ENDPOINTS"]) == (
        "http://127.0.0.1:9999/fake/v1", "http://127.0.0.1:9999/other/api")
    assert [b["endpoint"] for b in dev.connection_bodies(cfg.cloud_url, {"fakecloud": "t"}).values()] == [
        "http://127.0.0.1:9999/fake/v1"]


def test_grpc_clouds_go_to_the_grpc_listener_over_tls_when_their_sdk_talks_tls(tmp_path: Path) -> None:
    """Nebius (its SDK talks TLS, as to the real cloud) at the gRPC listener's TLS port with the
    simulation's CA; Modal (grpclib, plain text to a local server) at its plain port."""
    cfg = dev.DevConfig(home=tmp_path, cloud_grpc_port=9767, cloud_grpc_tls_port=9768)
    argv = dev.simulation_argv(cfg)
    assert argv[argv.index("--grpc-tls-port") + 1] == "9768"
    bodies = dev.connection_bodies(cfg.cloud_url, {"nebius": "n", "modal": "m"}, cfg.cloud_tls_url, "CA PEM",
                                   cfg.cloud_grpc_url, cfg.cloud_grpc_tls_url)
    assert bodies["nebius"]["endpoint"] == "https://127.0.0.1:9768"
    assert bodies["nebius"]["ca_bundle"] == "CA PEM"
    assert bodies["modal"]["endpoint"] == "http://127.0.0.1:9767" and "ca_bundle" not in bodies["modal"]
    with pytest.raises(dev.DevError, match="TLS"):
        dev.simulated_endpoints(cfg.cloud_url, ["nebius"], grpc_url=cfg.cloud_grpc_url)


def test_the_dev_stack_allows_loopback_fleet_hosts_but_not_its_own_ports(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUPROV_FLEET_ALLOWED_NETWORKS", raising=False)
    cfg = dev.DevConfig(home=tmp_path, api_port=8111, temporal_port=7222, cloud_port=9999)
    env = dev.child_env(cfg, clouds.simulated())
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    policy = FleetAddresses.from_settings(Settings())  # as the dev stack's API and worker read it
    assert policy.check("127.0.5.6", 2222).address == "127.0.5.6"
    for port in (8111, 7222):
        with pytest.raises(AddressRefused, match="of this installation"):
            policy.check("127.0.0.1", port)


@pytest.fixture
async def api_client(engine: sa.Engine, workflows: FakeInstantWorkflows) -> AsyncIterator[httpx.AsyncClient]:
    deps = AppDeps(engine=engine, box=workflows.box, api_token=TOKEN, installation_id="inst0001",
                   workflows=workflows, allowed_endpoints=("http://sim/fake/v1",))
    workflows.allowed_endpoints = deps.allowed_endpoints  # the worker's setting: the same list
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app_serving(deps)),
                                 base_url="http://api/api/compute",
                                 headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        yield c


async def test_connect_simulated_connects_each_cloud_once(api_client: httpx.AsyncClient,
                                                          simulated: dict[str, Facade],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    bodies: dict[str, dict[str, Any]] = {
        "fakecloud": dev.connection_bodies("http://sim", {"fakecloud": GOOD_KEY})["fakecloud"]}
    await dev.connect_simulated(api_client, bodies)
    assert "connected fakecloud (simulated) (fake-account-7)" in capsys.readouterr().out
    await dev.connect_simulated(api_client, bodies)  # a restart: already connected
    assert capsys.readouterr().out == ""
    [conn] = (await api_client.get("/connections")).json()["items"]
    assert (conn["provider"], conn["name"], conn["endpoint"]) == (
        "fakecloud", "fakecloud (simulated)", "http://sim/fake/v1")
    refused = dev.connection_bodies("http://sim", {"othersim": "whatever"})
    await dev.connect_simulated(api_client, refused)  # othersim has no adapter: reported, not fatal
    assert "could not connect othersim: body.provider: unknown cloud 'othersim'" in capsys.readouterr().out
