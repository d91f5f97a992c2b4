"""The xdist units tests/tiers.py gives the `processes` tests: two lanes, by fixture or module."""

from __future__ import annotations

from types import SimpleNamespace

from tests import tiers


def fake_item(module: object, *fixtures: str) -> SimpleNamespace:
    """FAKE: what `_unit` reads of a pytest item."""
    return SimpleNamespace(fixturenames=list(fixtures), module=module, nodeid="tests/x.py::test")


def test_a_process_test_goes_to_the_crash_lane_by_its_fixture_or_its_modules_say() -> None:
    plain = SimpleNamespace()
    assert tiers._unit(fake_item(plain, "processes"), "processes") == "processes:stacks"
    assert tiers._unit(fake_item(plain, "processes", "worker_process"), "processes") == "processes:crash"
    moved = SimpleNamespace(TESTS_LANE="crash")
    assert tiers._unit(fake_item(moved, "processes"), "processes") == "processes:crash"
    # A test of another tier is its file's unit, whatever its module says.
    assert tiers._unit(fake_item(moved), "simulation") == "tests/x.py"


class FakeOrderedItem:
    """FAKE: what `order` reads of a pytest item (its tier marker, its unit, its fixtures)."""

    def __init__(self, nodeid: str, tier: str, unit: str, *fixtures: str) -> None:
        self.nodeid, self.fixturenames = nodeid, list(fixtures)
        self._markers = [SimpleNamespace(name=tier), SimpleNamespace(name="xdist_group", args=(unit,))]

    def iter_markers(self) -> list[SimpleNamespace]:
        return self._markers

    def get_closest_marker(self, name: str) -> SimpleNamespace | None:
        return next((m for m in self._markers if m.name == name), None)


def test_a_lanes_files_that_wait_for_the_machine_setup_run_after_the_rest_of_it() -> None:
    stacks = "processes:stacks"
    items = [
        FakeOrderedItem("tests/a/test_console.py::t1", "processes", stacks, "processes", "machine_ready"),
        FakeOrderedItem("tests/a/test_console.py::t2", "processes", stacks, "processes"),
        FakeOrderedItem("tests/b/test_api.py::t", "devserver", "tests/b/test_api.py", "temporal_env"),
        FakeOrderedItem("tests/c/test_crash.py::t", "processes", stacks, "processes"),
        FakeOrderedItem("tests/d/test_x.py::t", "acceptance", "acceptance", "acceptance_worker"),
    ]
    tiers.order(items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == [
        "tests/d/test_x.py::t",  # heaviest tier first
        "tests/c/test_crash.py::t",  # then the lane: a file that needs nothing of the setup first
        "tests/a/test_console.py::t1", "tests/a/test_console.py::t2",  # a file stays together, in order
        "tests/b/test_api.py::t",
    ]
