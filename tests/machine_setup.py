"""What the suite needs from the machine itself, set up at the start of `make test` instead of when the
first test that needs it runs: Debian's podman, runc and mmdebstrap and the sshd image's root file
system (providers/docker_engine.py), and Debian's chromium (tests/browser/chromium.py).

A fresh machine has none of them. The tests install each where they first need it, and that was one
install after another in the middle of the process lanes: apt-get update, podman, mmdebstrap's image,
apt-get update again, chromium — about 140 s of a fresh run that those lanes spent waiting (measured
2026-12-05 from /var/log/apt/history.log against the run's start). `make test` now starts this first,
in the background, before it builds the venv: one apt-get update, the engine's packages, then
chromium's install beside the image build. It holds the same locks the tests' own installers take
(`docker_engine._setup_lock`, `chromium.LOCK`), so a test that gets there first waits for it rather
than running apt beside it; the session fixture `machine_ready` (tests/conftest.py) waits for it before
a test starts processes that need any of it, and tests/tiers.py runs those tests last in their lanes.

Only an accelerator: if anything here fails (it logs to `log_path()`), the tests' own installers run
as before and say what failed. Standard library only — `make test` runs it with the system's python3,
before the venv exists.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from providers import docker_engine
from tests.browser import chromium

READY = "machine setup: started"
ALREADY = "machine setup: already under way in another process"


def _say(announce: IO[str] | None, line: str) -> None:
    if announce is not None:
        announce.write(line + "\n")
        announce.flush()


def log_path() -> Path:
    return docker_engine.cache_dir().parent / "machine-setup.log"


def missing() -> dict[str, bool]:
    """What this machine lacks: the engine's packages and image (only where no engine answers already:
    the tests then use that one), and chromium."""
    own_engine = docker_engine.existing_engine() is None
    return {
        "engine packages": own_engine and not docker_engine.packages_installed(),
        "engine image": own_engine and not docker_engine.image_tar().exists(),
        "chromium": not os.access(chromium.CHROMIUM, os.X_OK),
    }


def can_install() -> bool:
    return os.geteuid() == 0 and shutil.which("apt-get") is not None


class _Held:
    """An exclusive flock on `path`, taken at construction and released once. With `wait=False`,
    BlockingIOError when another process holds it."""

    def __init__(self, path: Path, *, wait: bool = True) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = path.open("w")
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.release()
            raise

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing drops the lock
            self._file = None


def wait() -> None:
    """Block while a setup (this module's, or a test's own install) holds either lock."""
    for path in (docker_engine.setup_lock_path(), chromium.LOCK):
        _Held(path).release()


def _run(log: IO[str], *cmd: str) -> None:
    t0 = time.monotonic()
    done = subprocess.run(cmd, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
                          stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    log.write(f"--- {' '.join(cmd)}: exit {done.returncode} in {time.monotonic() - t0:.1f} s\n")
    log.flush()
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}")


def prepare(needed: dict[str, bool], log: IO[str], announce: IO[str] | None = None) -> None:
    """Install what `needed` names. Both locks are taken before the announcement; chromium's is
    released once it is installed, the engine's once the image is built (or on failure). Where
    another process holds either (an earlier `make test`'s setup, a test's own install), that one
    is under way and the tests will wait for it: nothing more is done here."""
    try:
        engine_lock = _Held(docker_engine.setup_lock_path(), wait=False)
    except BlockingIOError:
        return _say(announce, ALREADY)
    try:
        chromium_lock = _Held(chromium.LOCK, wait=False)
    except BlockingIOError:
        engine_lock.release()
        return _say(announce, ALREADY)
    failed: list[BaseException] = []

    def install_chromium() -> None:
        try:
            if needed["chromium"]:
                _run(log, "apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium")
        except BaseException as e:  # raised below; the browser tests install it themselves
            failed.append(e)
        finally:
            chromium_lock.release()

    try:
        _say(announce, READY)
        _run(log, "apt-get", "update", "-q")
        if needed["engine packages"]:
            _run(log, "apt-get", "install", "-y", "-q", *docker_engine.APT_PACKAGES)
        # mmdebstrap builds in a directory of its own (its own dpkg database and lock), so the host's
        # chromium install runs beside it.
        beside = threading.Thread(target=install_chromium)
        beside.start()
        try:
            if needed["engine image"]:
                docker_engine.build_image_tar_holding_lock()
        finally:
            beside.join()
        if failed:
            raise failed[0]
    finally:
        chromium_lock.release()
        engine_lock.release()


def start_in_background() -> str:
    """Start `prepare` in a process of its own and return once it holds the locks (or found nothing
    to do): the caller's tests then find either what they need or a lock to wait on."""
    needed = missing()
    if not any(needed.values()):
        return "machine setup: nothing missing"
    if not can_install():
        return "machine setup: not root or no apt-get; the tests install what they need themselves"
    log_path().parent.mkdir(parents=True, exist_ok=True)
    child = subprocess.Popen([sys.executable, "-m", "tests.machine_setup"], stdout=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, text=True, start_new_session=True,
                             cwd=Path(__file__).resolve().parent.parent)
    assert child.stdout is not None
    first = child.stdout.readline().strip()
    child.stdout.close()
    wanted = ", ".join(name for name, need in needed.items() if need)
    return f"{first or 'machine setup: did not start'} ({wanted}; log {log_path()})"


def main() -> int:
    if sys.argv[1:] == ["--background"]:
        print(start_in_background())
        return 0
    with log_path().open("a") as log:
        needed = missing()
        log.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} {needed}\n")
        log.flush()
        try:
            prepare(needed, log, announce=sys.stdout)
        except Exception as e:  # the tests' own installers run as before and report it
            log.write(f"=== failed: {e}\n")
            return 1
        log.write(f"=== done {time.strftime('%H:%M:%S')}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
