"""The suite's tiers. Each test's tier is read off the fixtures it uses, never written by hand:

- `processes`: it runs real service processes (`gpuprov dev`, a worker, the API, the simulation as a
  process of its own): it uses the `processes` fixture, without which DevRun, Process, WorkerProcess
  and `tests.processes.simulation_process` refuse to start (so the marker cannot be missing).
- `devserver`: it needs a Temporal server (the session's dev server, or a time-skipping one).
- `simulation`: it talks to the simulated clouds in this process (fakeclouds), no Temporal server.
- `pure`: none of these.

A test has exactly one tier, the first of that list it qualifies for. `make test-fast` runs
`-m "pure or simulation"` (no Temporal server, no process stacks); `make test` runs all four.

For pytest-xdist (`make test` runs `--dist loadgroup`), each test also gets an `xdist_group`: its
file, so a file's tests run in order on one worker and share its module fixtures — unless the
module says `TESTS_RUN_APART = True` (its tests share no state but session fixtures, which each
worker makes its own), when each test is a unit of its own. All `processes` tests are one unit:
they run one after another on one worker while the others share the rest. Collection orders the files heaviest
tier first (stable within a tier), so the long process stacks start early instead of becoming the
tail everyone waits for.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from types import ModuleType
from typing import Any

import pytest

TIERS = ("processes", "devserver", "simulation", "pure")
DESCRIPTIONS = {
    "processes": "runs real service processes (the `processes` fixture)",
    "devserver": "needs a Temporal server (dev server or time-skipping)",
    "simulation": "talks to the in-process simulated clouds (fakeclouds), no Temporal server",
    "pure": "no Temporal server, no simulation, no processes",
}
# The fixtures that put a test in a tier (pytest's fixture closure includes every fixture a
# fixture depends on, so a test that uses `stack`, which uses `temporal_client`, is devserver).
PROCESS_FIXTURES = frozenset({"processes"})
TEMPORAL_FIXTURES = frozenset({"temporal_env", "time_skipping_env"})
SIMULATION_PACKAGE = "fakeclouds"

_uses_simulation: dict[str, bool] = {}


def _names_simulation(module: ModuleType) -> bool:
    """Whether `module` imported anything from the simulation (a module, class or function of it)."""
    cached = _uses_simulation.get(module.__name__)
    if cached is not None:
        return cached
    found = False
    for value in vars(module).values():
        origin = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", None)
        if isinstance(origin, str) and origin.split(".")[0] == SIMULATION_PACKAGE:
            found = True
            break
    _uses_simulation[module.__name__] = found
    return found


def _fixture_modules(item: pytest.Item) -> Iterable[ModuleType]:
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info else ()):
        for fixturedef in defs:
            module = sys.modules.get(getattr(fixturedef.func, "__module__", ""))
            if module is not None:
                yield module


def tier_of(item: pytest.Item) -> str:
    names = set(getattr(item, "fixturenames", ()))
    if names & PROCESS_FIXTURES:
        return "processes"
    if names & TEMPORAL_FIXTURES:
        return "devserver"
    module: Any = getattr(item, "module", None)
    if module is not None and _names_simulation(module):
        return "simulation"
    if any(map(_names_simulation, _fixture_modules(item))):
        return "simulation"
    return "pure"


def configure(config: pytest.Config) -> None:
    for tier in TIERS:
        config.addinivalue_line("markers", f"{tier}: {DESCRIPTIONS[tier]} (applied by tests/tiers.py)")


def mark(items: list[pytest.Item]) -> None:
    """Give each item its tier marker (refusing a hand-written one), then order heaviest tier first."""
    rank = {tier: i for i, tier in enumerate(TIERS)}
    tiers: dict[str, str] = {}
    for item in items:
        written = [m.name for m in item.iter_markers() if m.name in TIERS]
        if written:
            raise pytest.UsageError(f"{item.nodeid}: tier markers are applied from fixtures (tests/"
                                    f"tiers.py), not written by hand: remove @pytest.mark.{written[0]}")
        tier = tier_of(item)
        item.add_marker(getattr(pytest.mark, tier))
        tiers[item.nodeid] = tier
        item.add_marker(pytest.mark.xdist_group(_unit(item, tier)))
    # A file's rank is its heaviest test's, so a file's tests stay together.
    file_rank: dict[str, int] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        file_rank[path] = min(file_rank.get(path, len(TIERS)), rank[tiers[item.nodeid]])
    items.sort(key=lambda item: file_rank[item.nodeid.split("::")[0]])


def _unit(item: pytest.Item, tier: str) -> str:
    """The xdist unit of work `item` belongs to: its file, or itself where its module allows; every
    `processes` test one unit together, run one after another on one worker — two stacks of
    processes at once on a 2-core machine starve each other past their waits (seen: a worker that
    took 10 s to start, a `gpuprov dev` that took over 90 s to connect its clouds)."""
    if tier == "processes":
        return "processes"
    module: Any = getattr(item, "module", None)
    if getattr(module, "TESTS_RUN_APART", False):
        return item.nodeid
    return item.nodeid.split("::")[0]
