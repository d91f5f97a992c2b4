"""The embedded Temporal dev server (`make run`'s, the tests', bench's) sends nothing off this machine.

Each server here runs inside a network namespace of the test's own whose resolv.conf names 127.0.0.1,
where a listener (tests/netns_dns.py) prints every DNS query it hears. Started with the project's
flags (workflows/dev_server.py) it asks no name; the same server without the version-check flag asks
for version-info.temporal.io as it starts — the control, without which a listener that heard nothing
would prove nothing. Before the flag, every start asked this box's resolver (a private address). (It
does not hold the start up: with a resolver that never answers, the server serves in ~0.5 s either way.)"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TEMPORAL_BIN
from tests.eventually import eventually
from workflows import dev_server

REPO = Path(__file__).resolve().parents[2]
VERSION_CHECK_OFF = ["--dynamic-config-value", "frontend.enableServerVersionCheck=false"]


@dataclass
class Namespace:
    name: str
    heard: list[str] = field(default_factory=list)  # the names the listener was asked, in order
    procs: list[asyncio.subprocess.Process] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)  # held: the loop keeps only weak refs

    async def exec(self, *argv: str, **kw: Any) -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec("ip", "netns", "exec", self.name, *argv, **kw)
        self.procs.append(proc)
        return proc

    async def serving(self) -> bool:
        """The dev server in this namespace answers its health check."""
        health = await asyncio.create_subprocess_exec(
            "ip", "netns", "exec", self.name, str(TEMPORAL_BIN), "operator", "cluster", "health",
            "--address", "127.0.0.1:7233", stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL)
        return await health.wait() == 0


async def listen(ns: Namespace) -> None:
    proc = await ns.exec(sys.executable, "-m", "tests.netns_dns", stdout=asyncio.subprocess.PIPE, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout is not None
    assert await asyncio.wait_for(proc.stdout.readline(), 60) == b"ready\n"

    async def record() -> None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            ns.heard.append(line.decode().strip())
    ns.tasks.append(asyncio.get_running_loop().create_task(record()))  # ends at the listener's EOF


def ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True, timeout=30)


@pytest.fixture
async def namespaces(tmp_path: Path) -> AsyncIterator[list[Namespace]]:
    """Two namespaces with only loopback, each resolving through its own listener; processes, namespaces
    and their resolv.conf removed even when setup fails."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2 (CI runs as root)")
    tag = uuid.uuid4().hex[:6]
    made = [Namespace(f"gptd{tag}{i}") for i in range(2)]
    try:
        for ns in made:
            ip("netns", "add", ns.name)
            ip("-n", ns.name, "link", "set", "lo", "up")
            etc = Path("/etc/netns") / ns.name  # `ip netns exec` mounts these over /etc
            etc.mkdir(parents=True)
            (etc / "resolv.conf").write_text("nameserver 127.0.0.1\n")
            await listen(ns)
        yield made
    finally:
        for ns in made:
            for proc in ns.procs:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
            shutil.rmtree(Path("/etc/netns") / ns.name, ignore_errors=True)
            ip("netns", "del", ns.name, check=False)


async def test_the_dev_server_as_started_here_asks_no_name(namespaces: list[Namespace], tmp_path: Path,
                                                          processes: None) -> None:
    assert " ".join(VERSION_CHECK_OFF) in " ".join(dev_server.FLAGS), "the flag this test is about"
    control_flags = " ".join(dev_server.FLAGS).replace(" ".join(VERSION_CHECK_OFF), "").split()
    ours, control = namespaces
    for ns, flags in ((ours, dev_server.FLAGS), (control, control_flags)):
        await ns.exec(str(TEMPORAL_BIN), "server", "start-dev", "--headless", "--ip", "127.0.0.1",
                      "--port", "7233", "--db-filename", str(tmp_path / f"{ns.name}.db"),
                      "--log-level", "error", *flags,
                      stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)

    await eventually(ours.serving, within=120, what="the dev server started with the project's flags")
    await eventually(lambda: "version-info.temporal.io" in control.heard, within=120,
                     what="the control (no version-check flag) to ask for version-info.temporal.io")
    assert ours.heard == []
