"""Every dynamic-config key the project starts Temporal with (workflows/dev_server.FLAGS, and through
tests/deploy/test_compose.py docker-compose's Temporal) is a key the shipped server registers. The server
takes a key it does not know without a word — `temporal server start-dev --dynamic-config-value
history.noSuchKeyAtAll=5` starts and serves — so a misspelt key, or one a later server renames, would
silently leave Temporal's default in place (for the transfer queue's read rate: 42 ms per workflow step
instead of 12, bench/step_latency.py)."""

from __future__ import annotations

import mmap
from collections.abc import Iterator

import pytest

from tests.conftest import TEMPORAL_BIN
from workflows import dev_server


@pytest.fixture(scope="module")
def server_binary() -> Iterator[mmap.mmap]:
    with TEMPORAL_BIN.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as image:
        yield image


def registered(image: mmap.mmap, key: str) -> bool:
    """Is `key` among the server's registered keys? Each registered key is a string literal in its binary
    (a typo that is a prefix of another key would pass: the check is for renames and misspellings)."""
    return image.find(key.encode()) != -1


def test_the_flags_set_the_keys_this_project_relies_on() -> None:
    assert set(dev_server.dynamic_config()) >= {
        "frontend.enableServerVersionCheck", "matching.numTaskqueueReadPartitions",
        "matching.numTaskqueueWritePartitions", "history.transferProcessorMaxPollRPS",
        "system.enableActivityEagerExecution"}
    # The dev server's default, a stock server's false: docker-compose's Temporal gets it from here.
    assert dev_server.dynamic_config()["system.enableActivityEagerExecution"] == "true"


def test_every_dynamic_config_key_is_one_the_shipped_server_registers(server_binary: mmap.mmap) -> None:
    assert [key for key in dev_server.dynamic_config() if not registered(server_binary, key)] == []


def test_the_check_tells_a_misspelt_key(server_binary: mmap.mmap) -> None:
    # The check itself can fail: a key one letter off, and one the server never had.
    assert not registered(server_binary, "history.transferProcessorMaxPolRPS")
    assert not registered(server_binary, "history.noSuchKeyAtAll")
