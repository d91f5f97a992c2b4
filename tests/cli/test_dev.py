"""`gpuprov dev` end to end on free ports: starts every child, connects the simulated clouds
through the real ConnectWorkflow, stops everything on SIGINT, and keeps state across restarts."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes (its parent just has not reaped it yet)
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


class DevRun:
    def __init__(self, home: Path, ports: dict[str, int]) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPROV_")}
        env.update(GPUPROV_HOME=str(home), PYTHONUNBUFFERED="1", **{k: str(v) for k, v in ports.items()})
        self.proc = subprocess.Popen([sys.executable, "-m", "cli", "dev"], env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float = 90) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if m := re.search(pattern, line):
                    return m
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.1)
        raise AssertionError(f"{pattern!r} not printed; output:\n" + "\n".join(self.lines))

    def child_pids(self) -> list[int]:
        return [int(m.group(1)) for line in self.lines if (m := re.search(r" up \(pid (\d+)\)", line))]

    def interrupt(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(60)
        self._reader.join(5)
        return code


def test_dev_starts_connects_stops_and_restarts(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ports = {"GPUPROV_API_PORT": _free_port(), "GPUPROV_TEMPORAL_PORT": _free_port(),
             "GPUPROV_TEMPORAL_UI_PORT": _free_port(), "GPUPROV_LOCALCLOUD_PORT": _free_port()}
    api = f"http://127.0.0.1:{ports['GPUPROV_API_PORT']}"

    run = DevRun(home, ports)
    try:
        token = run.wait_for(r"API token\s+(\S+)").group(1)
        pids = run.child_pids()
        assert len(pids) == 4  # temporal, localcloud, worker, api
        token_file = home / "api-token"
        assert token_file.read_text().strip() == token and (token_file.stat().st_mode & 0o777) == 0o600
        headers = {"Authorization": f"Bearer {token}"}
        assert httpx.get(f"{api}/openapi.json", headers=headers).status_code == 200
        assert httpx.get(f"{api}/api/compute/connections").status_code == 401
        conns = httpx.get(f"{api}/api/compute/connections", headers=headers).json()
        assert sorted((c["provider"], c["name"], c["status"]) for c in conns) == [
            ("lambda", "lambda (simulated)", "connected"), ("local", "local", "connected")]
    finally:
        code = run.interrupt()
    assert code == 0, "\n".join(run.lines)
    assert "stopped" in run.lines
    assert [p for p in pids if _alive(p)] == []

    # Restart on the same home: same token, the connections are not made twice.
    again = DevRun(home, ports)
    try:
        assert again.wait_for(r"API token\s+(\S+)").group(1) == token
        conns = httpx.get(f"{api}/api/compute/connections", headers=headers).json()
        assert len(conns) == 2
        assert not any("connected " in line for line in again.lines)
    finally:
        assert again.interrupt() == 0
