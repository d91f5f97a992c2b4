"""A Docker Engine API for the `docker` cloud where none answers: Debian's podman serving one on a
socket of our own (`podman system service --time=0 unix://…`), and the sshd image built locally.

Used by `make run` (cli/dev.py) and the test session; never by the adapter itself, which only talks
to whatever engine its connection names. Nothing here reaches an image registry (none is reachable on
the machines this runs on): the image is a Debian bookworm root built by `mmdebstrap` with
openssh-server and imported with `podman import`, cached under the cache directory.

Podman needs, on these machines, `runc` as its runtime (crun fails on their hybrid cgroups) and
default ulimits for `nofile`/`nproc` (4096): both go in a `containers.conf` of our own, passed with
CONTAINERS_CONF, never written to /etc. Storage (`--root`/`--runroot`) is ours too, so `podman ps -a`
against the system store shows nothing of ours, and stopping the service leaves the system as it was.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

IMAGE = "localhost/gpuprov-sshd:bookworm"
SUITE = "bookworm"
APT_PACKAGES = ("podman", "runc", "mmdebstrap")
DEFAULT_SOCKET = "/var/run/docker.sock"
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]

[engine]
runtime = "runc"
"""


class EngineUnavailable(RuntimeError):
    """No engine answers and none could be started here (the reason says which step failed)."""


def cache_dir() -> Path:
    base = os.environ.get("GPUPROV_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "gpuprov"
    )
    return Path(base) / "engine"


def _socket_path(base_url: str) -> str | None:
    for prefix in ("unix://", "http+unix://"):
        if base_url.startswith(prefix):
            return base_url[len(prefix):]
    return None


def ping(base_url: str, timeout: float = 2.0) -> bool:
    """Whether a Docker Engine API answers `GET /_ping` at `base_url` (unix:// only)."""
    path = _socket_path(base_url)
    if path is None or not os.path.exists(path):
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(path)
            s.sendall(b"GET /_ping HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(4096):
                data += chunk
        return data.startswith(b"HTTP/1.1 200") or data.startswith(b"HTTP/1.0 200")
    except OSError:
        return False


def existing_engine() -> str | None:
    """DOCKER_HOST, or the default socket, when an engine answers there."""
    host = os.environ.get("DOCKER_HOST")
    if host:
        return host if ping(host) else None
    url = f"unix://{DEFAULT_SOCKET}"
    return url if ping(url) else None


def install_packages() -> None:
    """`apt-get install podman runc mmdebstrap` when any is missing (as root; about 45 s here)."""
    if packages_installed():
        return
    with _setup_lock():
        _install_packages()


def packages_installed() -> bool:
    return all(shutil.which(t) or os.path.exists(f"/usr/sbin/{t}") for t in APT_PACKAGES)


def _install_packages() -> None:
    if packages_installed():  # another process installed them while this one waited for the lock
        return
    if os.geteuid() != 0:
        raise EngineUnavailable("podman, runc or mmdebstrap is missing, and only root may install them")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", *APT_PACKAGES]):
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise EngineUnavailable(f"{' '.join(cmd)} failed: {r.stderr.strip()[-500:]}")


@dataclass
class PodmanService:
    """A podman API service on a socket of our own, with its own storage under `home`."""

    home: Path
    proc: subprocess.Popen[bytes] | None = None
    _log: object = field(default=None, repr=False)

    @property
    def socket(self) -> Path:
        # A unix socket path is limited to 107 bytes: keep it short when the home is deep.
        path = self.home / "engine.sock"
        digest = hashlib.sha256(str(self.home).encode()).hexdigest()[:12]  # stable for one home
        return path if len(str(path)) < 100 else Path(f"/tmp/gpuprov-engine-{digest}.sock")

    @property
    def base_url(self) -> str:
        return f"unix://{self.socket}"

    def env(self) -> dict[str, str]:
        conf = self.home / "containers.conf"
        return {**os.environ, "CONTAINERS_CONF": str(conf)}

    @property
    def runroot(self) -> Path:
        # podman refuses a runroot longer than 50 characters: a short one in /tmp when the home is deep.
        path = self.home / "run"
        digest = hashlib.sha256(str(self.home).encode()).hexdigest()[:12]
        return path if len(str(path)) <= 50 else Path(f"/tmp/gpuprov-run-{digest}")

    def podman(self, *args: str) -> list[str]:
        return ["podman", "--root", str(self.home / "storage"), "--runroot", str(self.runroot), *args]

    def start(self, timeout: float = 30.0) -> str:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "containers.conf").write_text(CONTAINERS_CONF)
        self.socket.unlink(missing_ok=True)
        log = open(self.home / "service.log", "ab")  # noqa: SIM115 — lives as long as the service
        self._log = log
        self.proc = subprocess.Popen(
            self.podman("system", "service", "--time=0", self.base_url),
            env=self.env(), stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EngineUnavailable(f"podman system service exited {self.proc.returncode}: "
                                        f"{(self.home / 'service.log').read_text()[-800:]}")
            if ping(self.base_url):
                return self.base_url
            time.sleep(0.1)
        self.stop()
        raise EngineUnavailable(f"podman system service did not answer on {self.socket} in {timeout:.0f} s")

    def ensure_image(self) -> float:
        """Import the sshd image into our storage (built once and cached as a tar); seconds spent."""
        t0 = time.monotonic()
        if subprocess.run(self.podman("image", "exists", IMAGE), env=self.env()).returncode == 0:
            return 0.0
        tar = build_image_tar()
        r = subprocess.run(self.podman("import", str(tar), IMAGE), env=self.env(),
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise EngineUnavailable(f"podman import failed: {r.stderr.strip()[-800:]}")
        return time.monotonic() - t0

    def stop(self) -> None:
        """Remove every container in our storage, then stop the service."""
        if self.proc is None:
            return
        subprocess.run(self.podman("rm", "--all", "--force", "--time", "0"), env=self.env(),
                       capture_output=True)
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        self.socket.unlink(missing_ok=True)
        if not self.runroot.is_relative_to(self.home):
            shutil.rmtree(self.runroot, ignore_errors=True)  # the run's state, in /tmp: nothing to keep
        if self._log is not None:
            self._log.close()  # type: ignore[attr-defined]
            self._log = None


def start_own(home: Path) -> PodmanService:
    """Install what is missing, start a podman service under `home` and import the image there."""
    install_packages()
    svc = PodmanService(home)
    svc.start()
    try:
        svc.ensure_image()
    except BaseException:
        svc.stop()
        raise
    return svc


@contextlib.contextmanager
def _setup_lock() -> Iterator[None]:
    """One install or image build at a time on this machine (a test session and `make run` may both
    start: apt's lock would refuse the second, and two builds would write one tar)."""
    setup_lock_path().parent.mkdir(parents=True, exist_ok=True)
    with open(setup_lock_path(), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def setup_lock_path() -> Path:
    return cache_dir() / ".setup.lock"


def image_tar() -> Path:
    return cache_dir() / f"sshd-{SUITE}.tar"


def build_image_tar() -> Path:
    """The image's root file system as a tar in the cache (mmdebstrap, about 40 s), built once."""
    tar = image_tar()
    if tar.exists():
        return tar
    with _setup_lock():
        return build_image_tar_holding_lock()


def build_image_tar_holding_lock() -> Path:
    """`build_image_tar` for a caller that holds the setup lock (tests/machine_setup.py)."""
    tar = image_tar()
    if not tar.exists():
        part = tar.with_suffix(f".{os.getpid()}.part")
        r = subprocess.run(
            ["mmdebstrap", "--variant=apt", "--include=openssh-server", "--format=tar", SUITE, str(part)],
            capture_output=True, text=True,
        )
        if r.returncode != 0:
            raise EngineUnavailable(f"mmdebstrap failed: {r.stderr.strip()[-800:]}")
        part.rename(tar)
    return tar


if __name__ == "__main__":  # `make docker-engine`: install podman and build the image ahead of time
    install_packages()
    print(build_image_tar())
