"""`gpuprov project ...` and `--project`: a project's token works in its project only."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from tests.api.conftest import GOOD_KEY

runner = CliRunner()


def ok(*args: str) -> str:
    r = runner.invoke(app, list(args))
    assert r.exit_code == 0, r.output
    return r.output


def test_projects_tokens_and_the_project_option(key_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "project vision created" in ok("project", "create", "vision")
    bad = runner.invoke(app, ["project", "create", "Vision"])
    assert bad.exit_code == 1 and "should match pattern" in bad.output
    made = ok("project", "token", "vision", "--label", "ci")
    token = made.strip().splitlines()[-1]
    assert token.startswith("gpt_") and "ci" in ok("project", "tokens", "vision")
    assert token not in ok("project", "tokens", "vision")  # shown once, never listed

    # The admin token in project vision: connect and allocate there.
    ok("--project", "vision", "connect", "fakecloud", "--credential", f"api_key={GOOD_KEY}")
    up = ok("--project", "vision", "up", "--cloud", "fakecloud", "--ssh-key", str(key_file))
    iid = up.split()[1]
    assert iid in ok("--project", "vision", "ls") and iid not in ok("ls")  # not in `default`

    # vision's own token sees vision's machine without --project, and nothing else.
    monkeypatch.setenv("GPUPROV_TOKEN", token)
    assert iid in ok("ls")
    assert ok("project", "ls").split()[2:] and "default" not in ok("project", "ls")
    other = runner.invoke(app, ["--project", "default", "ls"])
    assert other.exit_code == 1 and "no project 'default'" in other.output
    refused = runner.invoke(app, ["project", "create", "x"])
    assert refused.exit_code == 1 and "admin token" in refused.output

    [token_id] = [line.split()[0] for line in ok("project", "tokens", "vision").splitlines()[1:]]
    assert "revoked" in ok("project", "revoke", "vision", token_id)
    gone = runner.invoke(app, ["ls"])
    assert gone.exit_code == 1 and "refused the token" in gone.output
