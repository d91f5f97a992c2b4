"""The SDK's deadlock detector in test processes: 30 s, not 2 (tests/conftest.py says why); the
workers `python worker.py` runs never import the test conftest and keep the SDK's 2 s."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Worker

from tests.conftest import TEST_DEADLOCK_TIMEOUT_S
from worker import workflow_runner
from workflows.connect import ConnectWorkflow

ROOT = Path(__file__).resolve().parents[2]


async def test_an_in_process_worker_waits_30_s_before_calling_an_activation_a_deadlock(
        temporal_client: Client) -> None:
    worker = Worker(temporal_client, task_queue=f"deadlock-{uuid.uuid4().hex[:8]}",
                    workflows=[ConnectWorkflow], workflow_runner=workflow_runner())
    assert worker._workflow_worker is not None
    assert worker._workflow_worker._deadlock_timeout_seconds == TEST_DEADLOCK_TIMEOUT_S == 30


def test_the_worker_process_keeps_the_sdks_2_s() -> None:
    code = ("import worker, temporalio.worker._workflow as w, inspect; "
            "print('tests.conftest' in __import__('sys').modules, "
            "'_deadlock_timeout_seconds = None if self._debug_mode else 2' in inspect.getsource(w))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "True"], out.stderr
