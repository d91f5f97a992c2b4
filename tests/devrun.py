"""Runs `gpuprov dev` (what `make run` runs) as a subprocess on free ports, for end-to-end tests."""

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def alive(pid: int) -> bool:
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
    def __init__(self, home: Path, ports: dict[str, int], extra_env: dict[str, str] | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPROV_")}
        env.update(GPUPROV_HOME=str(home), PYTHONUNBUFFERED="1", **{k: str(v) for k, v in ports.items()})
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


def dev_ports() -> dict[str, int]:
    return {"GPUPROV_API_PORT": free_port(), "GPUPROV_TEMPORAL_PORT": free_port(),
            "GPUPROV_TEMPORAL_UI_PORT": free_port(), "GPUPROV_LOCALCLOUD_PORT": free_port()}
