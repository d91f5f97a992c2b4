from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fakeclouds import clouds
from fakeclouds.engine import Engine
from tests.fakeclouds.conftest import pubkey, ssh_key  # noqa: F401 — the same login key fixtures


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Engine]:
    """Every simulated cloud in one engine on this test's loop (machines boot in 50 ms)."""
    eng = Engine(facades=clouds.all_facades(), boot_delay=0.05, terminate_delay=0.01,
                 state_dir=tmp_path / "state")
    await eng.start()
    yield eng
    await eng.stop()
