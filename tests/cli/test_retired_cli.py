"""`gpuprov retired`: the operator's drain check before upgrading past a retired workflow type."""

from __future__ import annotations

import sqlalchemy as sa
from sqlmodel import Session
from typer.testing import CliRunner

from api.temporal import OpenRun
from cli import app
from messages import workflows as wf
from store.models import Instance
from tests.cli.conftest import FakeInstantWorkflows

runner = CliRunner()


def test_drained_exits_0_and_a_planted_row_or_open_run_exits_1_naming_it(
        engine: sa.Engine, workflows: FakeInstantWorkflows) -> None:
    r = runner.invoke(app, ["retired"])
    assert r.exit_code == 0 and r.output.startswith("drained:"), r.output
    with Session(engine) as s:
        s.add(Instance(id="old1", provider="fakecloud", connection_id="c1", workflow_id="allocate-old1",
                       status="ready"))
        s.commit()
    workflows.open = [OpenRun("terminate-old1", wf.RETIRED[1])]
    r = runner.invoke(app, ["retired"])
    assert r.exit_code == 1, r.output
    assert "terminate-old1" in r.output and "allocate-old1" in r.output and "old1" in r.output
    assert "gpuprov down ID" in r.output
