from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session
from typer.testing import CliRunner

from cli import app
from messages.workflows import UpdateRef
from store import instances
from tests.api.conftest import GOOD_KEY
from tests.cli.conftest import FakeInstantWorkflows

runner = CliRunner()


def _connect() -> None:
    r = runner.invoke(app, ["connect", "fakecloud", "--credential", f"api_key={GOOD_KEY}"])
    assert r.exit_code == 0, r.output
    assert "connected fakecloud as fake-account-7" in r.output


def test_connect_reports_the_reason_when_refused() -> None:
    r = runner.invoke(app, ["connect", "fakecloud", "--credential", "api_key=wrong"])
    assert r.exit_code == 1
    assert "could not verify fakecloud: Fake Cloud refused the API key (HTTP 400)" in r.output
    r = runner.invoke(app, ["connect", "fakecloud", "--credential", "api_key"])
    assert r.exit_code == 1 and "KEY=VALUE" in r.output


def test_offers_table() -> None:
    r = runner.invoke(app, ["offers", "--cloud", "fakecloud"])
    assert r.exit_code == 1 and "connect fakecloud first" in r.output
    _connect()
    r = runner.invoke(app, ["offers", "--cloud", "fakecloud", "--gpu", "a10"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].split() == ["CLOUD", "TYPE", "GPU", "VCPUS", "RAM", "REGION", "PRICE", "SPOT", "AVAIL"]
    assert "gpu.a10" in lines[1] and "1x A10" in lines[1] and "$0.75/h" in lines[1] and len(lines) == 2


def test_offers_without_a_cloud_asks_every_connected_cloud_and_says_what_each_answered() -> None:
    r = runner.invoke(app, ["offers"])
    assert r.exit_code == 1 and "no cloud connected" in r.output
    _connect()
    r = runner.invoke(app, ["offers", "--gpu", "h100"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].split()[:2] == ["CLOUD", "TYPE"] and lines[1].split()[:2] == ["fakecloud", "gpu.h100"]
    assert any(line.strip().startswith("fakecloud (") and "offers" in line for line in lines[2:]), r.output


def test_up_follows_to_ready_and_prints_attempts_and_ssh(key_file: Path) -> None:
    _connect()
    r = runner.invoke(app, ["up", "--cloud", "fakecloud", "--gpu", "A10", "--ssh-key", str(key_file)])
    assert r.exit_code == 0, r.output
    assert "attempt 1: fakecloud gpu.a10 in r1 ($0.75/h): capacity — sold out in r1" in r.output
    assert "attempt 2: fakecloud gpu.a10 in r2 ($0.75/h): created" in r.output
    assert "GPUs: NVIDIA A10" in r.output
    assert r.output.strip().endswith("ssh -p 2201 ubuntu@127.0.0.1")
    r = runner.invoke(app, ["ls"])
    assert r.exit_code == 0 and "ready" in r.output and "ssh -p 2201 ubuntu@127.0.0.1" in r.output


def test_up_refused_by_capabilities_shows_the_cloud_reason(key_file: Path) -> None:
    _connect()
    r = runner.invoke(app, ["up", "--cloud", "fakecloud", "--port", "8080", "--ssh-key", str(key_file)])
    assert r.exit_code == 1
    assert "error: --port needs a firewall API; Fake Cloud has none (HTTP 422)" in r.output
    r = runner.invoke(app, ["up", "--cloud", "fakecloud", "--ssh-key", str(key_file.parent / "missing.pub")])
    assert r.exit_code == 1 and "not found" in r.output


def test_a_refused_field_is_named_in_the_error(key_file: Path) -> None:
    """A 422's `detail` summarises its field errors: the CLI prints which field and why."""
    _connect()
    r = runner.invoke(app, ["up", "--cloud", "fakecloud", "--gpu-count", "65", "--ssh-key", str(key_file)])
    assert r.exit_code == 1
    assert "error: body.gpu_count: Input should be less than or equal to 64 (HTTP 422)" in r.output


def test_down_waits_until_terminated(key_file: Path) -> None:
    _connect()
    r = runner.invoke(app, ["up", "--cloud", "fakecloud", "--ssh-key", str(key_file), "--detach"])
    iid = r.output.split()[1]
    r = runner.invoke(app, ["down", iid])
    assert r.exit_code == 0, r.output
    assert r.output.strip().endswith(f"{iid} terminated: gone, verified by the cloud")
    assert runner.invoke(app, ["ls"]).output.strip() == "no instances"
    r = runner.invoke(app, ["down", "nope"])
    assert r.exit_code == 1 and "no instance 'nope' (HTTP 404)" in r.output


def test_bad_token_and_unreachable_api_are_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPROV_TOKEN", "wrong")
    r = runner.invoke(app, ["ls"])
    assert r.exit_code == 1 and "refused the token" in r.output
    monkeypatch.undo()  # back to the real HTTP client, pointed at a closed port
    monkeypatch.setenv("GPUPROV_TOKEN", "x")
    monkeypatch.setenv("GPUPROV_API_URL", "http://127.0.0.1:9")
    r = runner.invoke(app, ["ls"])
    assert r.exit_code == 1 and "cannot reach the gpuprov API at http://127.0.0.1:9" in r.output


def test_connect_reads_secrets_from_a_file_or_the_environment(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "key"
    secret.write_text(GOOD_KEY + "\n")
    r = runner.invoke(app, ["connect", "fakecloud", "-c", f"api_key=@{secret}"])
    assert r.exit_code == 0 and "connected fakecloud" in r.output, r.output
    monkeypatch.setenv("FAKE_CLOUD_KEY", GOOD_KEY)
    r = runner.invoke(app, ["connect", "fakecloud", "-c", "api_key=env:FAKE_CLOUD_KEY"])
    assert r.exit_code == 0 and "connected fakecloud" in r.output, r.output
    r = runner.invoke(app, ["connect", "fakecloud", "-c", "api_key=env:NOT_SET_ANYWHERE"])
    assert r.exit_code == 1 and "NOT_SET_ANYWHERE is not set" in r.output
    r = runner.invoke(app, ["connect", "fakecloud", "-c", f"api_key=@{tmp_path / 'missing'}"])
    assert r.exit_code == 1 and "cannot read" in r.output


def test_down_prints_the_teardown_not_the_provisioning_history(
        key_file: Path, engine: sa.Engine, workflows: FakeInstantWorkflows) -> None:
    _connect()
    up = runner.invoke(app, ["up", "--cloud", "fakecloud", "--ssh-key", str(key_file), "--detach"])
    iid = up.output.split()[1]
    with Session(engine) as s:  # the allocation's recorded history, as its workflow writes it
        instances.update_instance(s, iid, status="provisioning", phase="validate")
        instances.mark_phases(s, iid, [("provisioning", "plan"), ("provisioning", "create"),
                                       ("provisioning", "wait_running"), ("ready", "ready")])
    plain_terminate = workflows.request_update

    async def terminate_in_steps(workflow_id: str, update: UpdateRef[Any]) -> bool:
        with Session(engine) as s:  # the teardown's own steps, recorded like the workflow's, before its end
            instances.mark_phases(s, iid, [("terminating", "terminate"), ("terminated", "terminated")])
        return await plain_terminate(workflow_id, update)

    workflows.request_update = terminate_in_steps  # type: ignore[method-assign]
    r = runner.invoke(app, ["down", iid])
    assert r.exit_code == 0, r.output
    lines = r.output.strip().splitlines()
    assert lines[0] == f"terminating {iid} (fakecloud · r2) …"
    assert [line.split("] ", 1)[1] for line in lines[1:-1]] == [
        "terminating  phase terminate", "terminated   phase terminated"]
    assert lines[-1] == f"{iid} terminated: gone, verified by the cloud"
    for phase in ("validate", "plan", "create", "wait_running", "phase ready"):
        assert phase not in r.output  # the provisioning history is not reprinted
    r = runner.invoke(app, ["down", iid])
    assert r.exit_code == 0 and r.output.strip() == f"{iid} is already gone (terminated)"
