"""`gpuprov acceptance run`: asks before spending, refuses without --yes where it cannot ask, shows the
plan and each step, approves with --yes, and exits 1 unless every step passed (the workflow itself is
run against every simulation in tests/acceptance/)."""

from __future__ import annotations

import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet
from pydantic import BaseModel
from typer.testing import CliRunner

from cli import app
from cli.acceptance import PrivateWorker
from messages import workflows as wf
from messages.acceptance import (
    STEPS,
    AcceptancePlan,
    AcceptanceResult,
    AcceptanceState,
    AcceptanceStep,
    Approval,
)
from messages.workflows import QueryRef, SignalRef
from store.secrets import SecretBox
from tests.api.conftest import GOOD_KEY
from tests.cli.conftest import FakeInstantWorkflows

runner = CliRunner()
PLAN = AcceptancePlan(adapter_version="abc123", account="simulated", instance_type="gpu.a10", region="r1",
                      gpu="A10", gpu_count=1, price_per_hour=0.75)


class FakeAcceptanceWorkflows(FakeInstantWorkflows):
    """FAKE AcceptanceWorkflow answers: held with its plan until `approve`, then every step passed
    (or, declined, nothing run)."""

    approved: bool | None = None
    unanswered = False  # the plan's deadline passed: the run declined itself

    async def query(self, workflow_id: str, query: QueryRef[Any]) -> Any:
        run_id = workflow_id.removeprefix("acceptance-")
        if self.unanswered:
            return AcceptanceState(run_id=run_id, cloud="fakecloud", plan=PLAN, unanswered=True)
        if self.approved is None:
            return AcceptanceState(run_id=run_id, cloud="fakecloud", plan=PLAN, awaiting_approval=True,
                                   approve_by=datetime(2030, 1, 1, 0, 15, tzinfo=UTC))
        outcome = "passed" if self.approved else "not_run"
        steps = [AcceptanceStep(name=n, outcome=outcome, seconds=0.5, detail=f"{n} ok") for n in STEPS]
        result = AcceptanceResult(cloud="fakecloud", adapter_version="abc123", account="simulated",
                                  steps=steps, started_at=datetime(2030, 1, 1, tzinfo=UTC))
        return AcceptanceState(run_id=run_id, cloud="fakecloud", plan=PLAN, done=True, steps=steps,
                               result=result)

    async def signal(self, workflow_id: str, signal: SignalRef[Any], arg: BaseModel) -> bool:
        self.signals.append((workflow_id, signal.name, arg))
        if isinstance(arg, Approval):
            self.approved = arg.spend
            if not arg.spend:
                self.closed.add(workflow_id)  # declined, the run ends (the real one records its end)
        return True


@pytest.fixture
def workflows(engine: sa.Engine) -> FakeAcceptanceWorkflows:
    """The harness's API, with FAKE acceptance answers in place of Temporal's."""
    return FakeAcceptanceWorkflows(engine=engine, box=SecretBox(Fernet.generate_key()))


def _connection() -> str:
    r = runner.invoke(app, ["connect", "fakecloud", "--credential", f"api_key={GOOD_KEY}"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["connections"])
    return next(line.split()[0] for line in r.output.splitlines() if "fakecloud" in line)


def test_without_yes_and_without_a_terminal_nothing_starts(workflows: FakeInstantWorkflows) -> None:
    r = runner.invoke(app, ["acceptance", "run", "--connection", "c-any"])
    assert r.exit_code == 1
    assert "refusing to spend without --yes: there is no terminal to ask (nothing was started)" in r.output
    assert workflows.starts_of(wf.ACCEPTANCE.name) == []


def test_yes_shows_the_plan_approves_and_reports_every_step(workflows: FakeAcceptanceWorkflows) -> None:
    conn = _connection()
    r = runner.invoke(app, ["acceptance", "run", "--connection", conn, "--yes", "--no-kill-step"])
    assert r.exit_code == 0, r.output
    assert "offer: gpu.a10 in r1 (1x A10) at $0.75/h on a simulated account" in r.output
    assert "ceiling: $5 and 60 min" in r.output
    for name in STEPS:
        assert f"  {name}: passed" in r.output
    assert "acceptance passed: fakecloud" in r.output
    assert [type(a).__name__ for _, _, a in workflows.signals] == ["Approval"]
    [start] = workflows.starts_of(wf.ACCEPTANCE.name)
    assert start.arg.hold_for_approval and start.arg.kill_task_queue is None  # type: ignore[attr-defined]


def test_a_declined_plan_creates_nothing_and_exits_1(workflows: FakeAcceptanceWorkflows,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    conn = _connection()
    monkeypatch.setattr("cli.acceptance._ask", lambda yes, cloud, max_usd: False)  # the user says no
    monkeypatch.setattr("cli.acceptance.can_ask", lambda: True)
    r = runner.invoke(app, ["acceptance", "run", "--connection", conn, "--no-kill-step"])
    assert r.exit_code == 1, r.output
    assert "not spending: the run ends with nothing created" in r.output
    assert workflows.approved is False


def test_interrupted_at_the_question_the_run_is_declined(workflows: FakeAcceptanceWorkflows,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C at "spend up to …?": the run held for its answer would hold the account (one run at a
    time per account) until someone answered it through the API."""
    conn = _connection()

    def interrupted(yes: bool, cloud: str, max_usd: float) -> bool:
        raise KeyboardInterrupt

    monkeypatch.setattr("cli.acceptance._ask", interrupted)
    monkeypatch.setattr("cli.acceptance.can_ask", lambda: True)
    r = runner.invoke(app, ["acceptance", "run", "--connection", conn, "--no-kill-step"])
    assert r.exit_code == 130  # Ctrl-C
    assert workflows.approved is False and "declined: it ends with nothing created" in r.output
    again = runner.invoke(app, ["acceptance", "run", "--connection", conn, "--yes", "--no-kill-step"])
    assert "under way" not in again.output, "the connection was left held"
    assert len(workflows.starts_of(wf.ACCEPTANCE.name)) == 2


def test_an_answer_after_the_plans_deadline_says_the_run_declined_itself(
        workflows: FakeAcceptanceWorkflows, monkeypatch: pytest.MonkeyPatch) -> None:
    """The user was away past `approve_by`: their "yes" is refused with the reason, and the CLI does
    not go on to decline a run that already did (nor say it could not)."""
    conn = _connection()

    def late(yes: bool, cloud: str, max_usd: float) -> bool:
        workflows.unanswered = True  # the deadline passed while the question was open
        return True

    monkeypatch.setattr("cli.acceptance._ask", late)
    monkeypatch.setattr("cli.acceptance.can_ask", lambda: True)
    r = runner.invoke(app, ["acceptance", "run", "--connection", conn, "--no-kill-step"])
    assert r.exit_code == 1, r.output
    assert "answer by 2030-01-01T00:15:00Z: unanswered, the run declines itself" in r.output
    assert "declined itself: its plan was not answered in time" in r.output
    assert "was not declined" not in r.output and workflows.signals == []


def test_a_private_workers_temporary_files_go_to_its_own_directory_removed_when_it_stops(
        tmp_path: Path) -> None:
    """The worker-killed step SIGKILLs the private worker, which then cannot remove what it wrote to
    its temporary directory (an SDK adapter's CA file): that is a directory of its own, removed when
    the run stops it."""
    worker = PrivateWorker("gpuprov-acceptance-test", tmp_path / "worker.log", env={"PATH": "/usr/bin:/bin"})
    temp = Path(worker.environment()["TMPDIR"])
    assert temp.is_dir() and stat.S_IMODE(temp.stat().st_mode) == 0o700
    assert worker.environment()["PATH"] == "/usr/bin:/bin"  # the rest of its environment as given
    (temp / "gpuprov-azure-ca-left.pem").write_text("what a SIGKILLed worker left")
    worker.stop()  # never started here: nothing to signal
    assert not temp.exists()
