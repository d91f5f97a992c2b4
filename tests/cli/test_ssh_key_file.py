"""`gpuprov up --ssh-key`: the file is checked on this machine; a private key never leaves it."""

from __future__ import annotations

from pathlib import Path

import asyncssh
from typer.testing import CliRunner

from cli import app
from tests.cli.conftest import FakeInstantWorkflows

runner = CliRunner()


def test_a_private_key_file_is_refused_before_any_request(tmp_path: Path,
                                                          workflows: FakeInstantWorkflows) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    path = tmp_path / "id_ed25519"  # the private half, given by mistake
    path.write_bytes(key.export_private_key())
    r = runner.invoke(app, ["up", "--cloud", "fakecloud", "--ssh-key", str(path)])
    assert r.exit_code == 1
    assert f"--ssh-key {path}: this is a private key — paste the .pub file" in r.output
    assert "HTTP 4" not in r.output  # refused here, not by the API
    assert key.export_private_key().decode().splitlines()[1] not in r.output
    assert workflows.starts == []


def test_the_public_key_file_is_sent_re_serialised(tmp_path: Path, workflows: FakeInstantWorkflows) -> None:
    from cli.instances import read_ssh_key

    line = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    path = tmp_path / "id_ed25519.pub"
    path.write_text(line.replace(" ", "\t  ") + "  \n")
    assert read_ssh_key(path) == line
