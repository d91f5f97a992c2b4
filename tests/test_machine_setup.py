"""`make test`'s machine setup (tests/machine_setup.py): one apt-get update, the locks the tests' own
installers take held until each part is done, and a test that needs it waits for it. apt-get and
mmdebstrap are FAKE here (a recording runner): the real ones run at the start of every `make test`
on a machine that lacks them."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from providers import docker_engine
from tests import machine_setup
from tests.browser import chromium

ALL_MISSING = {"engine packages": True, "engine image": True, "chromium": True}


@pytest.fixture
def locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.setenv("GPUPROV_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(chromium, "LOCK", tmp_path / "chromium.lock")
    docker_engine.setup_lock_path().parent.mkdir(parents=True)
    return docker_engine.setup_lock_path(), chromium.LOCK


def free(path: Path) -> bool:
    """Whether another process could take `path`'s lock now (flock is per open file: a thread of
    this process opening it again would conflict too, but ask from outside to be sure)."""
    probe = ("import fcntl, sys; f = open(sys.argv[1], 'w')\n"
             "try:\n fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept OSError:\n sys.exit(1)")
    return subprocess.run([sys.executable, "-c", probe, str(path)]).returncode == 0


class FakeRecordingRunner:
    """FAKE apt-get and mmdebstrap: records each command, and what the locks were while it ran."""

    def __init__(self, locks: tuple[Path, Path]) -> None:
        self.locks = locks
        self.calls: list[tuple[str, bool, bool]] = []  # (command, engine lock free, chromium lock free)

    def run(self, log: object, *cmd: str) -> None:
        self.calls.append((" ".join(cmd), free(self.locks[0]), free(self.locks[1])))

    def build_image(self) -> Path:
        """Runs beside chromium's install: finishes only once chromium's lock is free (or 30 s)."""
        deadline = time.monotonic() + 30
        while not free(self.locks[1]) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.calls.append(("mmdebstrap", free(self.locks[0]), free(self.locks[1])))
        return Path("image.tar")


def test_one_update_then_each_install_with_its_lock_held_until_it_is_done(
        locks: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeRecordingRunner(locks)
    monkeypatch.setattr(machine_setup, "_run", fake.run)
    monkeypatch.setattr(docker_engine, "build_image_tar_holding_lock", fake.build_image)
    machine_setup.prepare(ALL_MISSING, log=None)  # type: ignore[arg-type]
    commands = [c for c, _, _ in fake.calls]
    assert commands[0] == "apt-get update -q"
    assert commands.count("apt-get update -q") == 1
    assert commands[1] == "apt-get install -y -q podman runc mmdebstrap"
    assert sorted(commands[2:]) == ["apt-get install -y -q --no-install-recommends chromium", "mmdebstrap"]
    held = {c: (engine_free, chromium_free) for c, engine_free, chromium_free in fake.calls}
    assert held["apt-get update -q"] == (False, False)
    assert held["apt-get install -y -q --no-install-recommends chromium"] == (False, False)
    # chromium installed: the browser tests may go on while the image is still built, under the engine's
    assert held["mmdebstrap"] == (False, True)
    assert free(locks[0]) and free(locks[1])  # both released at the end


def test_only_what_is_missing_is_installed_and_a_failure_releases_both_locks(
        locks: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeRecordingRunner(locks)

    def failing(log: object, *cmd: str) -> None:
        fake.run(log, *cmd)
        if cmd[:2] == ("apt-get", "install"):
            raise RuntimeError("apt-get install exited 100")

    monkeypatch.setattr(machine_setup, "_run", failing)
    monkeypatch.setattr(docker_engine, "build_image_tar_holding_lock", fake.build_image)
    only_chromium = {"engine packages": False, "engine image": False, "chromium": True}
    with pytest.raises(RuntimeError, match="exited 100"):
        machine_setup.prepare(only_chromium, log=None)  # type: ignore[arg-type]
    assert [c for c, _, _ in fake.calls] == ["apt-get update -q",
                                             "apt-get install -y -q --no-install-recommends chromium"]
    assert free(locks[0]) and free(locks[1])


@contextlib.contextmanager
def held_elsewhere(path: Path) -> Iterator[None]:
    """`path`'s lock held by another process (as an installing setup holds it) until the block ends."""
    hold = ("import fcntl, sys; f = open(sys.argv[1], 'w'); fcntl.flock(f, fcntl.LOCK_EX); "
            "print('held', flush=True); sys.stdin.readline()")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline().strip() == "held"
    try:
        yield
    finally:
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(30)


def test_a_test_that_needs_the_machine_waits_while_the_setup_holds_a_lock(locks: tuple[Path, Path]) -> None:
    waited = threading.Event()

    def waits() -> None:
        machine_setup.wait()
        waited.set()

    waiter = threading.Thread(target=waits)
    with held_elsewhere(locks[1]):
        waiter.start()
        assert not waited.wait(0.5)  # still held: still waiting
    waiter.join(30)
    assert waited.is_set()


def test_a_second_setup_while_one_is_under_way_does_nothing_and_says_so(
        locks: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeRecordingRunner(locks)
    monkeypatch.setattr(machine_setup, "_run", fake.run)
    for held in locks:
        said = io.StringIO()
        with held_elsewhere(held):
            machine_setup.prepare(ALL_MISSING, log=None, announce=said)  # type: ignore[arg-type]
        assert said.getvalue() == machine_setup.ALREADY + "\n" and fake.calls == []
        assert free(locks[0]) and free(locks[1])  # the lock it did take, it gave back
