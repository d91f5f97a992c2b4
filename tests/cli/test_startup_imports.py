"""What every `gpuprov` command pays before it runs: the imports of `cli` (pyproject's entry point).
asyncssh (~140 ms of CPU to import here, a third of the CLI's start-up) is imported only by the
commands that read a key or log in, not by `ls`, `--help` or any other."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the project, where `cli` imports from


def modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"],
                         capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    return set(out.stdout.split())


def test_the_cli_starts_without_asyncssh() -> None:
    loaded = modules_after("import cli")
    assert "cli.instances" in loaded  # the commands are all registered
    assert "asyncssh" not in loaded


def test_a_command_that_reads_a_key_imports_its_checker_then(tmp_path: Path) -> None:
    # What the key is checked against is tests/cli/test_ssh_key_file.py's; here, only that it runs.
    key = tmp_path / "k.pub"
    key.write_text("not a key\n")
    assert "asyncssh" in modules_after(
        "import cli\n"
        "from cli.instances import read_ssh_key\n"
        f"try:\n    read_ssh_key(__import__('pathlib').Path({str(key)!r}))\n"
        "except BaseException:\n    pass")
