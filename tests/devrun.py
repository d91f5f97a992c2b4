"""Runs `gpuprov dev` (what `make run` runs) as a subprocess on free ports, for end-to-end tests."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

from tests import processes
from tests.eventually import eventually_sync
from tests.processes import free_port


class DevRun:
    def __init__(self, home: Path, ports: dict[str, int], extra_env: dict[str, str] | None = None) -> None:
        processes.require("gpuprov dev")
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPROV_")}
        env.update(GPUPROV_HOME=str(home), PYTHONUNBUFFERED="1", **{k: str(v) for k, v in ports.items()})
        # The simulated clouds' documented rate limits (and the adapters' pacing) 1000x faster than real.
        env["GPUPROV_DEV_CLOUD_TIME_SCALE"] = "0.001"
        env.update(extra_env or {})
        self.proc = subprocess.Popen([sys.executable, "-m", "cli", "dev"], env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float = 180) -> re.Match[str]:
        """The first line matching `pattern`; fails at once if `gpuprov dev` exits without printing it."""
        def printed() -> re.Match[str] | None:
            ended = self.proc.poll() is not None and not self._reader.is_alive()  # before reading: all read
            for line in list(self.lines):
                if m := re.search(pattern, line):
                    return m
            if ended:
                raise AssertionError(f"{pattern!r} not printed; gpuprov dev exited ({self.proc.returncode}); "
                                     "output:\n" + "\n".join(self.lines))
            return None

        return eventually_sync(printed, within=timeout, what=f"{pattern!r} printed",
                               detail=lambda: "output:\n" + "\n".join(self.lines))

    def child_pids(self) -> list[int]:
        return [int(m.group(1)) for line in self.lines if (m := re.search(r" up \(pid (\d+)\)", line))]

    def interrupt(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(60)
        self._reader.join(5)
        return code


def dev_ports() -> dict[str, int]:
    return {"GPUPROV_API_PORT": free_port(), "GPUPROV_TEMPORAL_PORT": free_port(),
            "GPUPROV_TEMPORAL_UI_PORT": free_port(), "GPUPROV_LOCALCLOUD_PORT": free_port(),
            "GPUPROV_LOCALCLOUD_TLS_PORT": free_port(), "GPUPROV_LOCALCLOUD_GRPC_PORT": free_port(),
            "GPUPROV_LOCALCLOUD_GRPC_TLS_PORT": free_port(), "GPUPROV_WORKER_METRICS_PORT": free_port()}


# --------------------------------------------------------------------------- what a run leaves readable


def process_tree(root: int) -> list[int]:
    """`root` and every live descendant (by the parent pid in /proc/<pid>/stat)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):  # gone meanwhile
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    return tree


def command_lines(pids: list[int]) -> dict[int, str]:
    lines = {}
    for pid in pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
            lines[pid] = argv.replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # exited meanwhile
            pass
    return lines


def home_secrets(home: Path) -> dict[str, str]:
    """Every secret `gpuprov dev` keeps in `home`: the API token, the secret key, each cloud's token."""
    clouds = json.loads((home / "cloud-tokens.json").read_text())
    return {"api-token": (home / "api-token").read_text().strip(),
            "secret.key": (home / "secret.key").read_text().strip(),
            **{f"cloud token of {c}": t for c, t in clouds.items()}}


def readable_by_others(home: Path) -> list[str]:
    """`mode path` of `home` or a directory under it that is not 0700, and of each file there that
    group or others may use (links are not followed)."""
    found = [] if home.stat().st_mode & 0o777 == 0o700 else [f"{home.stat().st_mode & 0o777:o} {home}"]
    for top, dirs, files in os.walk(home):
        for path in (Path(top, name) for name in dirs + files):
            try:
                mode = path.lstat().st_mode
            except FileNotFoundError:  # removed while we walk (a WAL checkpoint, a temp file)
                continue
            loose = mode & 0o777 != 0o700 if stat.S_ISDIR(mode) else mode & 0o077 and not stat.S_ISLNK(mode)
            if loose:
                found.append(f"{mode & 0o777:o} {path.relative_to(home)}")
    return found


def assert_private(run: DevRun, home: Path) -> None:
    """Nothing of the run is readable by other users, and no process of it shows a secret in its
    command line (which every local user can read in /proc)."""
    loose = readable_by_others(home)
    assert loose == [], "readable by others:\n" + "\n".join(loose)
    secrets = home_secrets(home)
    lines = command_lines(process_tree(run.proc.pid))
    assert len(lines) >= 5, lines  # gpuprov dev, temporal, localcloud, worker, api
    shown = [f"{name} in {line}" for pid, line in lines.items() for name, value in secrets.items()
             if value in line]
    assert shown == [], "secrets on command lines:\n" + "\n".join(shown)
