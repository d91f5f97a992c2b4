"""fakeclouds/machine_processes.py: a simulated machine's processes end as a powered-off VM's do —
all at once, as far as any of them can tell."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakeclouds.machine_processes import power_off
from tests.eventually import eventually_sync


def test_power_off_leaves_no_process_a_line_to_run_after_another_died(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worst order: the child before its shell, time passing between the kills. The shell must
    not go on to its next line (a job's command whose `sleep` died first wrote its exit file, 0)."""
    home = tmp_path / "home"
    home.mkdir()
    shell = subprocess.Popen(["bash", "-c", 'sleep 600; touch "$HOME/ran-on"'],
                             env={**os.environ, "HOME": str(home)}, start_new_session=True)
    child = eventually_sync(lambda: _children(shell.pid), until=bool, within=10, what="the shell's sleep")[0]

    real_iterdir, real_kill = Path.iterdir, os.kill

    def child_first(self: Path) -> Iterator[Path]:
        entries = list(real_iterdir(self))
        if str(self) != "/proc":
            return iter(entries)
        return iter(sorted(entries, key=lambda e: (e.name != str(child), e.name)))

    def slow_kill(pid: int, sig: int) -> None:
        real_kill(pid, sig)
        if sig == signal.SIGKILL:
            time.sleep(0.3)  # the shell has time to run on, if it can

    monkeypatch.setattr(Path, "iterdir", child_first)
    monkeypatch.setattr(os, "kill", slow_kill)
    try:
        killed = power_off(home)
    finally:
        monkeypatch.undo()
    assert not (home / "ran-on").exists() and shell.wait(10) == -signal.SIGKILL
    assert killed == 2  # the shell and its sleep


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]
