"""providers/pacing.py's host-wide part: the lock files the host's processes share for a key."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from providers import pacing


async def test_a_time_written_before_the_hosts_last_boot_is_no_wait(tmp_path: Path) -> None:
    """CLOCK_MONOTONIC starts again at a boot, while the lock file stays: a time further ahead than
    one interval can only be from before, and must not hold the key's calls back for days."""
    pacer = pacing.Pacer(1.0, 12.0, scale=1.0, host_lock=tmp_path / "key")
    (tmp_path / "key.calls").write_text(repr(time.monotonic() + 30 * 86400))
    (tmp_path / "key.launches").write_text(repr(time.monotonic() + 30 * 86400))
    async with asyncio.timeout(30):
        async with pacer.slot(launch=True):
            pass
    # what it wrote back: this host's next call one interval after the answer, the next launch twelve
    calls = float((tmp_path / "key.calls").read_text())
    launches = float((tmp_path / "key.launches").read_text())
    assert 0 < calls - time.monotonic() <= 1.0 and 11.0 < launches - time.monotonic() <= 12.0


async def test_a_time_within_one_interval_is_waited_for(tmp_path: Path) -> None:
    """Another process's call answered just now: this one leaves one interval after it."""
    waits: list[float] = []
    pacer = pacing.Pacer(0.3, scale=1.0, host_lock=tmp_path / "key")
    (tmp_path / "key.calls").write_text(repr(time.monotonic() + 0.3))
    original, pacing.on_wait = pacing.on_wait, lambda _cloud, s: waits.append(s)
    try:
        async with pacer.slot():
            pass
    finally:
        pacing.on_wait = original
    assert len(waits) == 1 and 0.0 < waits[0] <= 0.3
