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
