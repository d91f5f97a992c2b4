"""`gpuprov up` without --cloud plans across every connected cloud; --cloud may repeat; --connection
names one connection; every create carries an Idempotency-Key, so an answer lost on the way is
asked for again without making a second machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncssh
import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

import cli.client
from cli import app
from messages import workflows as wf
from providers import registry
from providers.base import Capabilities
from tests.api.conftest import GOOD_KEY, FakeCloud
from tests.cli.conftest import FakeInstantWorkflows

runner = CliRunner()


class OtherCloud(FakeCloud):
    id = "othercloud"
    capabilities = Capabilities(display_name="Other Cloud", spot=True)


@pytest.fixture(autouse=True)
def other_cloud() -> Any:
    registry.register_for_tests(OtherCloud)
    yield
    registry.unregister_for_tests(OtherCloud.id)


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "id_ed25519.pub"
    path.write_text(asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode())
    return path


def connect(cloud: str) -> str:
    r = runner.invoke(app, ["connect", cloud, "--credential", f"api_key={GOOD_KEY}"])
    assert r.exit_code == 0, r.output
    return r.output.split("(connection ")[1].split(",")[0]


def last_request(workflows: FakeInstantWorkflows) -> Any:
    return workflows.starts_of(wf.ALLOCATION.name)[-1].arg.request  # type: ignore[attr-defined]


def test_up_without_cloud_plans_across_every_connected_cloud(key_file: Path,
                                                             workflows: FakeInstantWorkflows) -> None:
    fake, other = connect("fakecloud"), connect("othercloud")
    r = runner.invoke(app, ["up", "--spot", "--ssh-key", str(key_file)])
    assert r.exit_code == 0, r.output
    assert "accepted on every connected cloud" in r.output
    req = last_request(workflows)
    assert [(t.cloud, t.connection_id) for t in req.targets] == [("othercloud", other)]
    assert "note: skipped fakecloud: --spot needs spot/preemptible instances; Fake Cloud has none" in r.output

    r = runner.invoke(app, ["up", "--cloud", "fakecloud", "--cloud", "othercloud",
                            "--ssh-key", str(key_file)])
    assert r.exit_code == 0 and "accepted on fakecloud, othercloud" in r.output, r.output
    assert sorted(t.cloud for t in last_request(workflows).targets) == ["fakecloud", "othercloud"]

    r = runner.invoke(app, ["up", "--connection", fake, "--ssh-key", str(key_file)])
    assert r.exit_code == 0 and f"accepted on connection {fake}" in r.output, r.output
    assert [t.connection_id for t in last_request(workflows).targets] == [fake]
    r = runner.invoke(app, ["up", "--connection", fake, "--cloud", "fakecloud", "--ssh-key", str(key_file)])
    assert r.exit_code == 1 and "not both" in r.output


def test_up_sends_a_key_and_a_lost_answer_is_asked_again(key_file: Path, workflows: FakeInstantWorkflows,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    connect("fakecloud")
    real = cli.client.http_client
    sent: list[str | None] = []

    class LosesTheFirstAnswer:
        def __init__(self, client: TestClient) -> None:
            self.client, self.lost = client, False

        def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
            response = self.client.request(method, url, **kwargs)
            if method == "POST" and url.endswith("/instances"):
                sent.append(kwargs.get("headers", {}).get("Idempotency-Key"))
                if not self.lost:  # the API made it, the answer never arrived
                    self.lost = True
                    raise httpx.ReadError("connection reset")
            return response

    monkeypatch.setattr(cli.client, "http_client", lambda url, token: LosesTheFirstAnswer(real(url, token)))
    monkeypatch.setattr(cli.client, "RETRY_DELAYS_S", (0.01,))
    r = runner.invoke(app, ["up", "--cloud", "fakecloud", "--ssh-key", str(key_file)])
    assert r.exit_code == 0, r.output
    assert len(sent) == 2 and sent[0] is not None and sent[0] == sent[1]  # the same key, twice
    # The retry found the allocation the first request made: nothing was started again.
    [start] = workflows.starts_of(wf.ALLOCATION.name)
    iid = r.output.split()[1]
    assert len(iid) == 12 and start.workflow_id == f"allocation-{iid}"
    [row] = runner.invoke(app, ["ls"]).output.splitlines()[1:]  # one allocation
    assert row.startswith(iid)
