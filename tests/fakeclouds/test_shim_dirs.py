"""A temporary shim directory (and a test's simulated hosts' homes) goes only once nothing runs from
it: what still runs on a PATH through it, or with a HOME in it, is killed first — removed under a
live process, its `sudo shutdown` would find the host's own command (fakeclouds/shim_dirs.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from api.serve import process_alive
from fakeclouds.machine_processes import kill_users_of, remove_once_unused
from fakeclouds.server import start_subprocess
from tests.eventually import eventually_sync

REPO = Path(__file__).resolve().parents[2]


def _detached(env: dict[str, str], command: str = "sleep 600") -> subprocess.Popen[bytes]:
    """A shell in a session of its own (as `setsid`/`nohup` leave a job), with a child of its own."""
    return subprocess.Popen(["sh", "-c", f"{command} & wait"], env=env, start_new_session=True)


def _children_of(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_a_directory_goes_only_after_what_runs_from_it_is_killed(tmp_path: Path) -> None:
    root, sibling = tmp_path / "hosts", tmp_path / "hosts2"  # a prefix of the other's name
    (root / "a" / "bin").mkdir(parents=True)
    (sibling / "bin").mkdir(parents=True)
    on_path = _detached({"PATH": f"{root / 'a' / 'bin'}:/usr/bin:/bin"})
    at_home = _detached({"PATH": "/usr/bin:/bin", "HOME": str(root / "a")})
    bystander = _detached({"PATH": f"{sibling / 'bin'}:/usr/bin:/bin", "HOME": str(sibling)})
    try:
        grandchildren = eventually_sync(lambda: _children_of(on_path.pid) + _children_of(at_home.pid),
                                        within=10, what="each shell's sleep started",
                                        until=lambda c: len(c or []) == 2)
        assert remove_once_unused(root)
        assert not root.exists()
        assert on_path.wait(10) == -9 and at_home.wait(10) == -9
        # Their children too: they inherit the environment.
        eventually_sync(lambda: not any(process_alive(pid) for pid in grandchildren), within=10,
                        what="sleeps killed")
        assert bystander.poll() is None and sibling.exists()  # /tmp/x2 is not under /tmp/x
        assert kill_users_of(root) == 0
    finally:
        for p in (on_path, at_home, bystander):
            if p.poll() is None:
                os.killpg(p.pid, 9)
            p.wait(10)


# Makes both shim directories and starts a detached machine process on them, as a simulated cloud
# does, then exits normally: prints the directories and the process's pid.
_CLOUD_PROCESS = """
import json, subprocess
from fakeclouds import guest_power, host_guard
power, guard = guest_power.shim_dir(), host_guard.guard_dir()
job = subprocess.Popen(["sh", "-c", "sleep 600"], env={"PATH": f"{guard}:{power}:/usr/bin:/bin"},
                       start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(json.dumps({"dirs": [str(power), str(guard)], "job": job.pid}))
"""


def test_a_process_removes_its_shim_directories_at_exit_and_ends_what_ran_on_them(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", _CLOUD_PROCESS], env=env, cwd=REPO, capture_output=True,
                         text=True, timeout=60, check=True)
    made = json.loads(out.stdout)
    assert all(d.startswith(str(tmp_path)) for d in made["dirs"])
    try:
        eventually_sync(lambda: not process_alive(made["job"]), within=10, what="the detached process killed")
        assert [d for d in made["dirs"] if Path(d).exists()] == []
        assert list(tmp_path.iterdir()) == []
    finally:
        if process_alive(made["job"]):
            os.kill(made["job"], 9)


_KILLED = "import os, signal, sys\nsys.stdout.flush()\nos.kill(os.getpid(), signal.SIGKILL)\n"  # no atexit


def test_a_killed_process_directories_go_when_the_next_one_makes_its_own(tmp_path: Path) -> None:
    """SIGKILLed, a process runs no exit handler: its shim directories and the machine process on
    them stay — until the next process on the host makes shim directories of its own."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    dead = subprocess.run([sys.executable, "-c", _CLOUD_PROCESS + _KILLED], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert dead.returncode == -9
    made = json.loads(dead.stdout)
    try:
        assert all(Path(d).is_dir() for d in made["dirs"]) and process_alive(made["job"])
        subprocess.run([sys.executable, "-c", "from fakeclouds import guest_power; guest_power.shim_dir()"],
                       env=env, cwd=REPO, timeout=60, check=True)
        eventually_sync(lambda: not process_alive(made["job"]), within=10,
                        what="the left-behind process killed")
        assert list(tmp_path.iterdir()) == []  # the next process's own went at its exit
    finally:
        for d in made["dirs"]:  # the job and its children, whatever failed above
            kill_users_of(Path(d))


def test_a_killed_cloud_process_state_goes_when_the_next_one_makes_a_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A simulated cloud killed outright (or timed out of its shutdown, as a whole `make bench`'s
    thousands of machines once made it) leaves its temporary state directory: the next simulation
    process on the host removes it, as it does shim directories (fakeclouds/own_temp.py)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    cloud = start_subprocess(time_scale=0)
    cloud.kill()
    left = [d.name for d in tmp_path.iterdir()]
    assert any(n.startswith(f"fakeclouds-engine-{cloud.pid}-") for n in left), left
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", "from fakeclouds import guest_power; guest_power.shim_dir()"],
                   env=env, cwd=REPO, timeout=60, check=True)
    assert [d.name for d in tmp_path.iterdir() if d.name.startswith("fakeclouds-")] == []  # its cache kept
