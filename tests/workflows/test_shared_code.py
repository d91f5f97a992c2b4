"""Sandboxed runs share their workflow modules' code objects (workflows/shared_code.py) and nothing
else: each run still imports the module afresh (its own globals) and the sandbox still refuses a
non-deterministic call."""

from __future__ import annotations

import importlib
import os
import sys
import uuid
from pathlib import Path
from types import ModuleType

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

import worker
from tests.workflows.fake_sandbox_probe import FakeSandboxProbeWorkflow
from workflows import shared_code


def _fresh(name: str) -> ModuleType:
    """Import `name` again as a new module object (as the sandbox does for each run)."""
    saved = sys.modules.pop(name)
    try:
        return importlib.import_module(name)
    finally:
        sys.modules[name] = saved


def test_a_fresh_import_is_a_new_module_with_the_same_code() -> None:
    shared_code.install()
    one, two = _fresh("workflows.retries"), _fresh("workflows.retries")
    assert one is not two and one.backoff is not two.backoff
    assert one.backoff.__code__ is two.backoff.__code__  # one copy of the bytecode
    assert isinstance(one.__spec__.loader, shared_code.SharedCodeLoader)
    one.EXTRA = 1  # type: ignore[attr-defined]
    assert not hasattr(two, "EXTRA")  # globals stay per module


def test_an_edited_file_compiles_anew_and_site_packages_are_left_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared_code, "ROOT", tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    shared_code.install()
    name = f"probe_{uuid.uuid4().hex[:8]}"
    source = tmp_path / f"{name}.py"
    source.write_text("def f():\n    return 1\n")
    first = importlib.import_module(name)
    del sys.modules[name]
    source.write_text("def f():\n    return 2\n")
    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 10**9))
    second = importlib.import_module(name)
    del sys.modules[name]
    assert (first.f(), second.f()) == (1, 2)
    assert isinstance(second.__spec__.loader, shared_code.SharedCodeLoader)
    assert not isinstance(importlib.import_module("yaml").__spec__.loader, shared_code.SharedCodeLoader)


async def test_each_sandboxed_run_has_its_own_module_and_the_sandbox_still_refuses(
        temporal_client: Client) -> None:
    queue = f"shared-code-{uuid.uuid4().hex[:8]}"
    async with Worker(temporal_client, task_queue=queue, workflows=[FakeSandboxProbeWorkflow],
                      workflow_runner=worker.workflow_runner()):
        # Both open at once: each holds its module (an address could be reused once one is freed).
        handles = [await temporal_client.start_workflow(FakeSandboxProbeWorkflow.run, id=f"{queue}-{i}",
                                                        task_queue=queue) for i in range(2)]
        for h in handles:
            await h.signal(FakeSandboxProbeWorkflow.go)
        runs = [await h.result() for h in handles]
    assert [r[:2] for r in runs] == [["1", "refused"], ["1", "refused"]]  # fresh globals; still sandboxed
    assert runs[0][2] == runs[1][2]  # the run method's code object: one, shared
