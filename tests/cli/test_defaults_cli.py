"""`gpuprov defaults set|show|clear`: the project's default cloud, which `gpuprov up` without --cloud
plans on (issue 17, item 8); without one it plans over every connected cloud, as before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from providers import registry
from tests.cli.conftest import FakeInstantWorkflows
from tests.cli.test_planning_cli import OtherCloud, connect, last_request

runner = CliRunner()


@pytest.fixture(autouse=True)
def other_cloud() -> Iterator[None]:
    registry.register_for_tests(OtherCloud)
    yield
    registry.unregister_for_tests(OtherCloud.id)


def test_up_plans_on_the_default_cloud_set_from_the_cli(key_file: Path,
                                                        workflows: FakeInstantWorkflows) -> None:
    connect("fakecloud")
    other = connect("othercloud")
    shown = runner.invoke(app, ["defaults", "show"])
    assert shown.exit_code == 0 and "no default cloud" in shown.output
    refused = runner.invoke(app, ["defaults", "set", "--cloud", "nimbus"])
    assert refused.exit_code == 1 and "unknown cloud" in refused.output

    r = runner.invoke(app, ["defaults", "set", "--cloud", "othercloud", "--region", "r1"])
    assert r.exit_code == 0 and "plan on othercloud in r1" in r.output, r.output
    assert "default cloud othercloud in r1" in runner.invoke(app, ["defaults", "show"]).output
    r = runner.invoke(app, ["up", "--detach", "--ssh-key", str(key_file)])
    assert "accepted on othercloud in r1 (the project's default cloud)" in r.output, r.output
    req = last_request(workflows)
    assert [(t.cloud, t.connection_id) for t in req.targets] == [("othercloud", other)] and req.region == "r1"

    assert "cleared" in runner.invoke(app, ["defaults", "clear"]).output
    r = runner.invoke(app, ["up", "--detach", "--ssh-key", str(key_file)])
    assert r.exit_code == 0 and "accepted on every connected cloud" in r.output
    assert sorted(t.cloud for t in last_request(workflows).targets) == ["fakecloud", "othercloud"]
