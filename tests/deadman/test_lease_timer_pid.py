"""A renewal starts the machine's lease timer unless *the timer* runs: a pid file left pointing at
another process (a reboot, the timer killed, the pid reused) starts a new one; the running timer is
recognised and not doubled. Run with `sh` in a temporary HOME (the timer's self-end here only
writes a file)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from activities import lease
from providers.base import SelfEnd

END = SelfEnd(method="shutdown", how="test", command='touch "$HOME/ended"')


def _renew(home: Path) -> None:
    script = lease.renew_command(1, END, hour=3600, poll=0.05)
    subprocess.run(["sh", "-c", script + "true"], env={**os.environ, "HOME": str(home)}, check=True,
                   timeout=10)


def _timer_pid(home: Path) -> int:
    return int((home / ".gpuprov" / "lease-timer.pid").read_text().strip())


def _is_timer(pid: int) -> bool:
    try:
        return lease.TIMER_MARK.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _becomes_timer(pid: int) -> bool:
    """Whether `pid` shows the timer's mark within 10 s: the pid is written as the timer is started
    (`$!`), while its process may still be between fork and exec (its command line is read empty
    while exec replaces it: a fresh-clone run once failed here so)."""
    deadline = time.monotonic() + 10
    while not _is_timer(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_stale_pid_starts_a_new_timer_and_a_live_timer_is_kept(tmp_path: Path) -> None:
    other = subprocess.Popen(["sleep", "60"])  # alive, but not the timer
    try:
        (tmp_path / ".gpuprov").mkdir()
        (tmp_path / ".gpuprov" / "lease-timer.pid").write_text(f"{other.pid}\n")
        _renew(tmp_path)
        first = _timer_pid(tmp_path)
        assert first != other.pid and _becomes_timer(first)
        _renew(tmp_path)
        assert _timer_pid(tmp_path) == first  # recognised: not a second timer
    finally:
        other.kill()
        (tmp_path / ".gpuprov" / "lease").unlink(missing_ok=True)  # the timer's cue to stop
    deadline = time.monotonic() + 10
    while _is_timer(first) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _is_timer(first) and not (tmp_path / "ended").exists()  # stopped, nothing ended
