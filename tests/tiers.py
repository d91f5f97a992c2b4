"""The suite's tiers. Each test's tier is read off the fixtures it uses, never written by hand:

- `acceptance`: the acceptance suite (workflows/acceptance.py) against every simulation, with the
  runner's private worker process killed mid-create: it uses `acceptance_worker` (tests/acceptance/).
  One lane of its own; `make test-acceptance` runs it alone.
- `processes`: it runs real service processes (`gpuprov dev`, a worker, the API, the simulation as a
  process of its own): it uses the `processes` fixture (or `module_processes`, for processes a
  module's tests share), without which DevRun, Process, WorkerProcess and
  `tests.processes.simulation_process` refuse to start (so the marker cannot be missing).
- `devserver`: it needs a Temporal server (the session's dev server, or a time-skipping one).
- `simulation`: it talks to the simulated clouds in this process (fakeclouds), no Temporal server.
- `pure`: none of these.

A test has exactly one tier, the first of that list it qualifies for. `make test-fast` runs
`-m "pure or simulation"` (no Temporal server, no process stacks); `make test` runs all five.

For pytest-xdist (`make test` runs `--dist loadscope`, scheduled by `UnitScheduling` below), each test
also gets a unit of work (an `xdist_group` marker): its
file, so a file's tests run in order on one worker and share its module fixtures — unless the
module says `TESTS_RUN_APART = True` (its tests share no state but session fixtures, which each
worker makes its own), when each test is a unit of its own. The `processes` tests are two units,
two lanes that each run one test at a time: the crash tests (one `python worker.py` killed and
restarted) and the stacks (`gpuprov dev` and the browser tests, Docker's engine). A stacks module
may say `TESTS_LANE = "crash"` to run in the crash lane instead, to keep the two lanes' lengths
near each other (the compose services and the API killed do; the suite lasts at least as long as
its longer lane). Collection orders the files heaviest tier first (stable within a tier), and the
scheduler hands units out in that order, so the two lanes start first instead of becoming the tail
everyone waits for.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

TIERS = ("acceptance", "processes", "devserver", "simulation", "pure")
DESCRIPTIONS = {
    "acceptance": "the acceptance suite against the simulations (the `acceptance_worker` fixture)",
    "processes": "runs real service processes (the `processes` fixture)",
    "devserver": "needs a Temporal server (dev server or time-skipping)",
    "simulation": "talks to the in-process simulated clouds (fakeclouds), no Temporal server",
    "pure": "no Temporal server, no simulation, no processes",
}
# The fixtures that put a test in a tier (pytest's fixture closure includes every fixture a
# fixture depends on, so a test that uses `stack`, which uses `temporal_client`, is devserver).
PROCESS_FIXTURES = frozenset({"processes", "module_processes", "package_processes", "session_processes"})
# The acceptance suite's runs against every simulation (tests/acceptance/): a tier and a lane of
# their own, whatever else they use (the private worker process among it).
ACCEPTANCE_FIXTURES = frozenset({"acceptance_worker"})
# A `processes` test with one of these runs in the crash lane (tests/crash/conftest.py's worker
# process, killed and restarted); every other one in the stacks lane.
CRASH_LANE_FIXTURES = frozenset({"worker_process", "pool_worker"})
TEMPORAL_FIXTURES = frozenset({"temporal_env", "time_skipping_env"})
# A test that needs what `make test`'s machine setup installs (tests/machine_setup.py) runs after those
# of its lane that do not, so on a fresh machine the setup has finished before the lane gets there.
MACHINE_FIXTURES = frozenset({"machine_ready"})
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
    if names & ACCEPTANCE_FIXTURES:
        return "acceptance"
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


def mark_one(item: pytest.Item) -> None:
    """Give `item` its tier marker (refusing a hand-written one) and its xdist unit, as it is
    collected: pytest-xdist reads `xdist_group` in its own pytest_collection_modifyitems, which may
    run before any conftest's."""
    written = [m.name for m in item.iter_markers() if m.name in TIERS]
    if written:
        raise pytest.UsageError(f"{item.nodeid}: tier markers are applied from fixtures (tests/"
                                f"tiers.py), not written by hand: remove @pytest.mark.{written[0]}")
    tier = tier_of(item)
    item.add_marker(getattr(pytest.mark, tier))
    item.add_marker(pytest.mark.xdist_group(_unit(item, tier)))


def order(items: list[pytest.Item]) -> None:
    """Files heaviest tier first (a file's rank is its heaviest test's, so its tests stay together);
    within a tier, the files that need the machine setup after those that do not (the process lanes
    start with what a fresh machine can already run), then larger units first, so the last units
    handed out are single tests: the workers then finish together instead of one finishing a whole
    file while the others wait."""
    rank = {tier: i for i, tier in enumerate(TIERS)}

    def tier(item: pytest.Item) -> str:
        return next(m.name for m in item.iter_markers() if m.name in TIERS)

    def path(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    def unit(item: pytest.Item) -> str:
        mark = item.get_closest_marker("xdist_group")
        return str(mark.args[0]) if mark else path(item)

    file_rank: dict[str, int] = {}
    file_waits: dict[str, bool] = {}
    unit_size: dict[str, int] = {}
    for item in items:
        file_rank[path(item)] = min(file_rank.get(path(item), len(TIERS)), rank[tier(item)])
        waits = bool(set(getattr(item, "fixturenames", ())) & MACHINE_FIXTURES)
        file_waits[path(item)] = file_waits.get(path(item), False) or waits
        unit_size[unit(item)] = unit_size.get(unit(item), 0) + 1
    items.sort(key=lambda item: (file_rank[path(item)], file_waits[path(item)], -unit_size[unit(item)]))


def _unit(item: pytest.Item, tier: str) -> str:
    """The xdist unit of work `item` belongs to: its file, or itself where its module allows; the
    `processes` tests in two lanes, each run one test after another on one worker. One lane was
    the suite's tail (about 600 s of its 730); more than two at once on a 2-core machine starve
    each other past their waits (seen with three: a worker that took 10 s to start, a `gpuprov
    dev` that took over 90 s to connect its clouds)."""
    if tier == "processes":
        names = set(getattr(item, "fixturenames", ()))
        moved = getattr(getattr(item, "module", None), "TESTS_LANE", None) == "crash"
        return "processes:crash" if names & CRASH_LANE_FIXTURES or moved else "processes:stacks"
    if tier == "acceptance":
        return "acceptance"
    module: Any = getattr(item, "module", None)
    if getattr(module, "TESTS_RUN_APART", False):
        return item.nodeid
    return item.nodeid.split("::")[0]


# --------------------------------------------------------------------------- xdist units

# pytest-xdist's own `--dist loadgroup` renames each item's nodeid to carry its group, which pytest
# 9.2 no longer allows (silently: every test is then a unit of its own). So the units travel
# another way: each worker writes the units it collected (nodeid -> unit) to a folder the
# controller made, and the controller's scheduler (`UnitScheduling`, a LoadScopeScheduling)
# groups by them. The controller makes the folder and names it in the environment before it
# starts the workers, which inherit it.
UNITS_DIR_ENV = "GPUPROV_TEST_UNITS_DIR"


def share_units(items: list[pytest.Item], worker_id: str) -> None:
    folder = os.environ.get(UNITS_DIR_ENV)
    if not folder:
        return
    units = {}
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        units[item.nodeid] = mark.args[0] if mark else item.nodeid.split("::")[0]
    path = Path(folder) / f"{worker_id}.json"
    path.with_suffix(".tmp").write_text(json.dumps(units))
    path.with_suffix(".tmp").replace(path)


def units_folder() -> str:
    folder = tempfile.mkdtemp(prefix="gpuprov-test-units-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    os.environ[UNITS_DIR_ENV] = folder
    return folder


def unit_scheduling(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    folder = os.environ[UNITS_DIR_ENV]

    class UnitScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """Load scheduling by the units tests/tiers.py gave each test (read once every worker has
        collected: the scheduler asks for scopes only then), handed out in collection order (`order`
        above: the process lanes first). LoadScope's own order, largest unit first, started the
        process lane 50 s late, behind files of many small tests."""

        _units: dict[str, str] | None = None

        def __init__(self, config: pytest.Config, log: Any) -> None:
            super().__init__(config, log)
            self.config.option.loadscopereorder = False

        def _split_scope(self, nodeid: str) -> str:
            if self._units is None:
                found = sorted(Path(folder).glob("*.json"))
                self._units = json.loads(found[0].read_text()) if found else {}
            return self._units.get(nodeid) or nodeid.split("::")[0]

    return UnitScheduling(config, log)
