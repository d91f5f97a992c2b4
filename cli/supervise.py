"""Child processes of `gpuprov dev`: started in their own session, health-checked while they
boot, stopped in reverse order, and killed with the supervisor if it dies."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import httpx
import typer

from api.serve import die_with_parent


class DevError(Exception):
    pass


@dataclass
class Child:
    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self, env: dict[str, str]) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            # Own session: a terminal Ctrl-C reaches only `gpuprov dev`, which stops children in order.
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         preexec_fn=die_with_parent)  # if `gpuprov dev` is killed

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            # Its whole process group (its own session, above): the API's processes are children
            # of the one started here, and a SIGKILLed parent stops none of them.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@dataclass
class Supervisor:
    """Starts children one by one, each healthy before the next; stops them all in reverse."""

    home: Path
    env_overrides: dict[str, str]
    boot_timeout_s: float = 60.0
    children: list[Child] = field(default_factory=list)
    stop_requested: asyncio.Event = field(default_factory=asyncio.Event)

    def env(self) -> dict[str, str]:
        return {**os.environ, **self.env_overrides, "PYTHONUNBUFFERED": "1"}

    async def launch(self, name: str, argv: list[str], healthy: Callable[[], Awaitable[bool]]) -> Child:
        child = Child(name, argv, self.home / "logs" / f"{name}.log")
        child.start(self.env())
        self.children.append(child)
        deadline = time.monotonic() + self.boot_timeout_s
        while True:
            if self.stop_requested.is_set():
                raise DevError("interrupted")
            if child.exited() is not None:
                raise DevError(f"{name} exited with code {child.exited()} during start; "
                               f"last lines of {child.log}:\n{child.tail()}")
            try:
                if await healthy():
                    break
            except Exception:  # noqa: BLE001 — not up yet
                pass
            if time.monotonic() > deadline:
                raise DevError(f"{name} not healthy after {self.boot_timeout_s:g}s; see {child.log}")
            await asyncio.sleep(0.2)
        typer.echo(f"  {name:<9} up (pid {child.proc.pid if child.proc else '?'})")
        return child

    def first_dead(self) -> Child | None:
        return next((c for c in self.children if c.exited() is not None), None)

    def stop_all(self) -> None:
        for child in reversed(self.children):
            child.stop()
        self.children.clear()


# --------------------------------------------------------------------------- health checks


def exit_after_clients(code: int) -> NoReturn:
    """End `gpuprov dev` with `code` once it has stopped everything: the health checks below made
    Temporal clients, whose SDK threads would now and then abort the interpreter's teardown
    (workflows/converter.py, exit_after_client)."""
    from workflows.converter import exit_after_client

    exit_after_client(code)


async def http_ok(url: str, token: str | None = None) -> bool:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(timeout=2) as c:
        return (await c.get(url, headers=headers)).status_code == 200


async def worker_polling(address: str, task_queue: str) -> bool:
    """Healthy = the worker is polling our task queue (so a workflow started now will run)."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
    from temporalio.client import Client

    client = await Client.connect(address)
    resp = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
        namespace="default", task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW))
    return len(resp.pollers) > 0


async def temporal_up(address: str) -> bool:
    from temporalio.client import Client

    client = await Client.connect(address)
    return bool(await client.service_client.check_health())
