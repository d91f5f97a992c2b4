"""`gpuprov job run|ls|logs|cancel` against the real app (no worker: the job's output and end are
written here as its activities write them)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlmodel import Session
from typer.testing import CliRunner

from cli import app
from messages import workflows as wf
from messages.job import JobStatus, RecordJobInput
from store import jobs as job_store
from tests.api.conftest import GOOD_KEY
from tests.cli.conftest import FakeInstantWorkflows

runner = CliRunner()


def ok(*args: str) -> str:
    r = runner.invoke(app, list(args))
    assert r.exit_code == 0, r.output
    return r.output


def test_run_ls_logs_cancel(engine: sa.Engine, workflows: FakeInstantWorkflows) -> None:
    ok("connect", "fakecloud", "--credential", f"api_key={GOOD_KEY}")
    out = ok("job", "run", "echo hi", "--name", "hello", "--type", "sft", "--gpu", "a10",
             "--requested-by", "me")
    job_id = out.split()[1]
    assert [s.workflow for s in workflows.starts_of(wf.JOB.name)] == [wf.JOB.name]
    assert "hello" in ok("job", "ls") and "1× a10" in ok("job", "ls")
    with Session(engine) as s:
        job_store.append_chunk(s, job_id, 0, b"hi\n")
        job_store.append_chunk(s, job_id, 3, b"there\n")
        job_store.record(s, RecordJobInput(job_id=job_id, status=JobStatus.SUCCEEDED, exit_code=0))
    assert ok("job", "logs", job_id) == "hi\nthere\n"
    assert ok("job", "logs", job_id, "--offset", "3") == "there\n"
    assert ok("job", "logs", job_id, "--follow").startswith("hi\nthere\n")  # the job ended: it returns
    assert f"job {job_id} succeeded" in ok("job", "cancel", job_id)  # ended: stays as it ended


def test_run_refuses_an_option_as_image_and_control_characters_before_sending(
        engine: sa.Engine, workflows: FakeInstantWorkflows) -> None:
    ok("connect", "fakecloud", "--credential", f"api_key={GOOD_KEY}")
    for args, why in ((["true", "--image", "--privileged"], "must not begin with '-'"),
                      (["true", "--image", "Ubuntu"], "image reference"),
                      (["echo a\x00b"], "U+0000")):
        r = runner.invoke(app, ["job", "run", *args])
        assert r.exit_code == 1 and why in r.output, r.output
    assert workflows.starts_of(wf.JOB.name) == []


def test_run_with_a_retry_policy_sends_it(engine: sa.Engine, workflows: FakeInstantWorkflows) -> None:
    ok("connect", "fakecloud", "--credential", f"api_key={GOOD_KEY}")
    out = ok("job", "run", "train.sh", "--gpu", "a10", "--retry-on", "preempted",
             "--retry-on", "machine_lost", "--retry-on", "preempted", "--restarts", "2",
             "--retry-where", "same_cloud")
    [start] = workflows.starts_of(wf.JOB.name)
    retry = getattr(start.arg, "retry", None)
    assert retry is not None and out.split()[1] in start.workflow_id
    assert ([c.value for c in retry.on], retry.restarts, retry.where.value) == (
        ["preempted", "machine_lost"], 2, "same_cloud")
    for args in (["--retry-on", "preempted"], ["--restarts", "1"]):
        r = runner.invoke(app, ["job", "run", "true", *args])
        assert r.exit_code == 1 and "--retry-on and --restarts go together" in r.output, r.output
    r = runner.invoke(app, ["job", "run", "true", "--retry-on", "sunspots", "--restarts", "1"])
    assert r.exit_code == 2 and "sunspots" in r.output, r.output
    assert len(workflows.starts_of(wf.JOB.name)) == 1
