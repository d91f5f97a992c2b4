"""`gpuprov up --max-hours`: parsed as a number, sent as the request's max_hours, and refused with the
cloud's reason where the cloud enforces no lifetime."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli import app
from messages import workflows as wf
from tests.api.conftest import GOOD_KEY, FakeCloud
from tests.cli.conftest import FakeInstantWorkflows

runner = CliRunner()


def _connect() -> None:
    r = runner.invoke(app, ["connect", "fakecloud", "--credential", f"api_key={GOOD_KEY}"])
    assert r.exit_code == 0, r.output


def test_up_max_hours_is_refused_where_the_cloud_enforces_no_lifetime(
        key_file: Path, workflows: FakeInstantWorkflows) -> None:
    _connect()
    r = runner.invoke(app, ["up", "--cloud", "fakecloud", "--max-hours", "2", "--ssh-key", str(key_file)])
    assert r.exit_code == 1
    assert ("error: --max-hours needs a cloud that stops a machine itself after a set lifetime; "
            "Fake Cloud does not (HTTP 422)") in r.output
    assert workflows.starts_of(wf.ALLOCATION.name) == []


def _up_with(key_file: Path, workflows: FakeInstantWorkflows, *flags: str) -> Any:
    """`gpuprov up --detach` with `flags` on the fake cloud: the one allocation request it started."""
    r = runner.invoke(app, ["up", "--cloud", "fakecloud", *flags, "--detach", "--ssh-key", str(key_file)])
    assert r.exit_code == 0, r.output
    [start] = workflows.starts_of(wf.ALLOCATION.name)
    return start.arg.request  # type: ignore[attr-defined]


def test_up_max_hours_reaches_the_request(key_file: Path, workflows: FakeInstantWorkflows,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FakeCloud, "capabilities",
                        FakeCloud.capabilities.model_copy(update={"max_lifetime_h": 24.0}))
    _connect()
    assert _up_with(key_file, workflows, "--max-hours", "1.5").max_hours == 1.5
    r = runner.invoke(app, ["up", "--cloud", "fakecloud", "--max-hours", "2h", "--ssh-key", str(key_file)])
    assert r.exit_code == 2 and "--max-hours" in r.output  # not a number: refused before any request
    r = runner.invoke(app, ["clouds"])
    assert r.exit_code == 0 and "max_hours<=24" in r.output


def test_up_lease_hours_reaches_the_request(key_file: Path, workflows: FakeInstantWorkflows) -> None:
    """`gpuprov up --lease-hours`: the request's lease (0: off); out of 0..720 refused before sending."""
    _connect()
    assert _up_with(key_file, workflows, "--lease-hours", "0").lease_hours == 0
    r = runner.invoke(app, ["up", "--cloud", "fakecloud", "--lease-hours", "721", "--ssh-key", str(key_file)])
    assert r.exit_code == 2 and "--lease-hours" in r.output
    assert len(workflows.starts_of(wf.ALLOCATION.name)) == 1
