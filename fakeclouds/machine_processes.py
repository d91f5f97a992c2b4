"""The processes of a simulated machine, beside its SSH server: its user data's files (under its
`root`), `#!` scripts and runcmd, run once at boot and detached (output in
`$HOME/cloud-init-output.log`), and power-off, which kills everything still running in its home.
The engine (`engine.py`) calls these as machines boot and go; `kill_users_of` ends what still runs
from a directory about to be removed (a shim directory, a test's hosts).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fakeclouds import cloudinit

log = logging.getLogger(__name__)


def root_of(home: Path) -> Path:
    """Where the machine's files outside its home live (cloud-init's write_files): `/etc/x` is
    `<root>/etc/x`. Never the host's own."""
    return home.parent / "root"


def tmp_of(home: Path) -> Path:
    """The machine's /tmp (its processes' TMPDIR), made if missing: what they write there (a
    `mktemp` in a boot script) stays the machine's, never the host's /tmp."""
    tmp = root_of(home) / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return tmp


def run_user_data(home: Path, user_data: str | None, env: dict[str, str]) -> None:
    # Like cloud-init at first boot: write_files, then the "#!" scripts and runcmd, once (keys were
    # added at create).
    parsed = cloudinit.parse(user_data)
    for f in parsed.files:
        _write(root_of(home), f)
    scripts = list(parsed.scripts)
    if parsed.runcmd:  # cloud-init writes runcmd as one shell script, run with the others
        scripts.append("#!/bin/sh\n" + "\n".join(parsed.runcmd) + "\n")
    for i, text in enumerate(scripts):
        script = home / f".user-data-{i}"
        script.write_text(text)
        script.chmod(0o700)  # run as the service's own user: nobody else's to read
        log_file = (home / "cloud-init-output.log").open("ab")
        asyncio.get_running_loop().create_task(_run_detached([str(script)], home, env, log_file))


def _write(root: Path, f: cloudinit.WriteFile) -> None:
    path = (root / f.path.lstrip("/")).resolve()
    if not path.is_relative_to(root.resolve()):  # "/../../x" stays on the machine, as on a real one
        log.warning("write_files %s leaves the machine's root: not written", f.path)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(f.content)
    path.chmod(f.mode & 0o777)  # never setuid/setgid on the host (the simulation may run as root)


async def _run_detached(argv: list[str], cwd: Path, env: dict[str, str], log_file: Any) -> None:
    try:
        proc = await asyncio.create_subprocess_exec(*argv, cwd=cwd, env=env, stdout=log_file,
                                                    stderr=log_file, start_new_session=True)
        await proc.wait()
    except OSError as exc:
        log.warning("user_data failed to start: %s", exc)
    finally:
        log_file.close()


def power_off(home: Path) -> int:
    """Kill what still runs on a terminated machine: every process whose HOME is the machine's home
    (its SSH server runs commands there). A detached command (setsid, nohup) outlives its session,
    as on a real VM, but not the VM itself. Returns how many were killed."""
    wanted = f"HOME={home}".encode()
    return len(_kill_where(lambda environ: wanted in environ))


def _kill_where(match: Callable[[list[bytes]], bool]) -> list[int]:
    """SIGKILL every process but this one whose environment (its `NAME=value` entries) `match`es,
    all of them stopped (SIGSTOP) first: as a powered-off machine's do, none runs another line after
    another one died — killed one at a time, a shell whose child went first ran on to its next
    command (a job's `echo $? > exit`: 0, for a command the machine's end cut short). Returns the
    pids killed."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if match((entry / "environ").read_bytes().split(b"\0")):
                os.kill(int(entry.name), signal.SIGSTOP)
                found.append(int(entry.name))
        except (OSError, ProcessLookupError):  # gone meanwhile, or not ours to read
            continue
    killed = []
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


def _wait_exited(pids: list[int], within_s: float = 5.0) -> None:
    """Until each of `pids` has exited (its environment no longer readable: gone, or a zombie
    waiting to be reaped), at most `within_s`: a SIGKILLed process takes a while to go on a busy
    host, and a scan meanwhile would find it again."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not any(_environ(pid) for pid in pids):
            return
        time.sleep(0.01)


def _environ(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def _names(entry: bytes, path: bytes) -> bool:
    """Whether an environment entry (`NAME=value`) names `path` or anything under it: as its value
    or as one of a PATH-like value's `:`-separated parts (`/tmp/x` is not `/tmp/x2`)."""
    _, _, value = entry.partition(b"=")
    return any(part == path or part.startswith(path + b"/") for part in value.split(b":"))


def kill_users_of(path: Path) -> int:
    """SIGKILL every process (but this one) whose environment names `path` or a path under it — a
    HOME there, a PATH through it: what a machine started there, detached or not, and its children,
    which inherit both. For a directory about to be removed: a process left running on a PATH through
    it would find the host's own commands (a `sudo shutdown` the host's) once it is gone. Returns how
    many were killed."""
    return len(_kill_users_of(path))


def _kill_users_of(path: Path) -> list[int]:
    wanted = str(path).encode()
    return _kill_where(lambda environ: any(_names(e, wanted) for e in environ))


def remove_once_unused(path: Path, rounds: int = 5) -> bool:
    """Remove the directory `path` once nothing runs from it: its users killed, and gone, until a
    scan finds none (a child forked while one scan ran is found by the next), then the directory.
    Left in place if processes still appear after `rounds` scans. Whether it was removed."""
    for _ in range(rounds):
        killed = _kill_users_of(path)
        if not killed:
            shutil.rmtree(path, ignore_errors=True)
            return True
        _wait_exited(killed)
    return False
