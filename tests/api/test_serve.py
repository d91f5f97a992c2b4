"""The API in several processes (`python -m api.serve`, api/serve.py): one port, each process writing
its cloud-call counters to one directory, and `/metrics` summing them — an operator's scrape reaches
one process at random and must read every process's calls, never a counter that jumps back."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from activities.metrics import CloudCallsCollector
from api import serve
from tests.api.test_metrics import at, samples
from tests.eventually import eventually_sync
from tests.processes import free_port

ROOT = Path(__file__).resolve().parents[2]

# One API process's cloud calls, as the offers pages' metered adapter counts them (activities/metrics.py)
CALLS = textwrap.dedent("""
    import sys
    from activities import metrics
    for _ in range(int(sys.argv[1])):
        metrics.CLOUD_CALLS.labels("lambda", "offers").inc()
        metrics.CLOUD_SECONDS.labels("lambda", "offers").observe(0.2)
    metrics.rate_limit_wait("lambda", "pacer", 1.5)
    metrics.LEASE_NOT_RENEWED.labels("lambda").inc()  # the worker's, never the API's to serve
""")


def test_a_scrape_sums_every_api_process_calls_even_once_one_exited(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "metrics"
    shared.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(shared), "PYTHONPATH": str(ROOT)}
    for calls in (2, 3):  # two processes, both exited by the time of the scrape
        subprocess.run([sys.executable, "-c", CALLS, str(calls)], env=env, cwd=ROOT, check=True, timeout=60)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(shared))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CloudCallsCollector())
    found = samples(generate_latest(registry).decode())
    offers = {"cloud": "lambda", "operation": "offers"}
    assert at(found, "gpuprov_cloud_calls_total", **offers) == 5
    assert at(found, "gpuprov_cloud_call_seconds_count", **offers) == 5
    assert at(found, "gpuprov_cloud_call_seconds_sum", **offers) == pytest.approx(1.0)
    assert at(found, "gpuprov_rate_limit_waits_total", cloud="lambda", source="pacer") == 2
    assert at(found, "gpuprov_rate_limit_wait_seconds_total", cloud="lambda", source="pacer") == 3.0
    assert not [name for name, _ in found if not name.startswith(("gpuprov_cloud_", "gpuprov_rate_limit_"))]


def _children(pid: int) -> list[int]:
    found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(c) for c in found]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:  # gone since listed
        return b""


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(kv.decode().split("=", 1) for kv in raw if b"=" in kv)


_LISTEN, _ESTABLISHED = "0A", "01"  # /proc/net/tcp's states


def _tcp_inodes(port: int, state: str) -> set[int]:
    """The inodes of the IPv4 sockets whose local port is `port`, in `state`."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == state:
            found.add(int(fields[9]))
    return found


def _socket_inodes(pid: int) -> set[int]:
    found = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # closed since listed
            target = os.readlink(fd)
            if target.startswith("socket:["):
                found.add(int(target[len("socket:["):-1]))
    return found


def _connections_per_process(port: int, pids: list[int], count: int) -> dict[int, int]:
    """Open `count` connections to `port` at once (as a browser opens its keep-alive connections):
    how many each of `pids` accepted."""
    sockets = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(count)]
    try:
        def accepted() -> dict[int, int] | None:
            served = _tcp_inodes(port, _ESTABLISHED)  # the server's ends (the clients' have other ports)
            per = {pid: len(_socket_inodes(pid) & served) for pid in pids}
            return per if sum(per.values()) == count else None

        return eventually_sync(accepted, within=60, what=f"{count} connections accepted")
    finally:
        for sock in sockets:
            sock.close()


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_the_api_serves_from_two_processes_that_share_one_metrics_directory(tmp_path: Path,
                                                                            stop: signal.Signals) -> None:
    """Stopped (SIGTERM), the launcher stops its processes and removes the directory; killed
    (SIGKILL), its processes stop too rather than hold the port."""
    home, port = tmp_path / "home", free_port()
    env = {**os.environ, "GPUPROV_HOME": str(home), "GPUPROV_DATABASE_URL": f"sqlite:///{tmp_path}/api.db",
           "GPUPROV_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}", "GPUPROV_API_WORKERS": "2"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    log = (tmp_path / "api.log").open("wb")
    argv = [sys.executable, "-m", "api.serve", "--port", str(port), "--log-level", "warning"]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        def up() -> bool:
            assert proc.poll() is None, (tmp_path / "api.log").read_text()
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        eventually_sync(up, within=120, what="the API to answer")

        def spawned() -> list[int] | None:  # uvicorn's processes, not multiprocessing's resource tracker
            found = [c for c in _children(proc.pid) if b"spawn_main" in _cmdline(c)]
            return found if len(found) == 2 else None

        workers = eventually_sync(spawned, within=60, what="two API processes")  # one answers first
        # Both count into one directory (each process's files named after its pid, made as it first
        # counts: the test above reads such files), made for this run.
        [shared] = {_environ(c)["PROMETHEUS_MULTIPROC_DIR"] for c in workers}
        assert Path(shared).is_dir() and not list(Path(shared).iterdir())
        token = (home / "api-token").read_text().strip()
        r = httpx.get(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {token}"},
                      timeout=30)
        assert r.status_code == 200 and "gpuprov_allocations" in r.text
        assert httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).status_code == 401
        # Each process listens on a socket of its own (the launcher on none), so a burst of
        # connections is spread between them by the kernel's hash — on uvicorn's one shared socket the
        # first process to wake took 7 or 8 of 8. All 32 on one process: a chance of 2 in 2^32.
        listening = eventually_sync(lambda: _tcp_inodes(port, _LISTEN),
                                    until=lambda found: found is not None and len(found) == 2,
                                    within=60, what="both processes to listen")
        assert [len(_socket_inodes(w) & listening) for w in workers] == [1, 1]
        assert not _socket_inodes(proc.pid) & listening
        assert all(_connections_per_process(port, workers, 32).values())
        if stop == signal.SIGTERM:  # a process that dies is replaced (the launcher stays)
            os.kill(workers[0], signal.SIGKILL)

            def replaced() -> list[int] | None:
                found = spawned()
                return found if found is not None and workers[0] not in found else None

            workers = eventually_sync(replaced, within=60, what="a process in the killed one's place")
            eventually_sync(up, within=60, what="the API to answer")
            eventually_sync(lambda: len(_tcp_inodes(port, _LISTEN)) == 2, within=60,
                            what="the new process to listen")
    finally:
        proc.send_signal(stop)
        code = proc.wait(60)
        log.close()
    eventually_sync(lambda: not any(serve.process_alive(w) for w in workers), within=60,
                    what="the API's processes to end")
    if stop == signal.SIGTERM:
        assert code == 0, (tmp_path / "api.log").read_text()
        assert not Path(shared).exists()  # a next run starts from no counts
    else:
        shutil.rmtree(shared)  # what a killed launcher cannot do (a fresh one makes its own)


def test_a_killed_launchers_directory_goes_at_the_next_start_and_nothing_else(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()  # a pid that has exited
    left = tmp_path / f"{serve.METRICS_PREFIX}{dead}-abc"
    running = tmp_path / f"{serve.METRICS_PREFIX}{os.getpid()}-def"  # a launcher still running
    with exited_unreaped() as zombie:  # a launcher that exited, its status not yet collected
        unreaped = tmp_path / f"{serve.METRICS_PREFIX}{zombie}-ghi"
        elsewhere = tmp_path / "elsewhere"
        for d in (left, running, unreaped, elsewhere):
            d.mkdir()
            (d / "counter_1.db").write_bytes(b"x")
        link = tmp_path / f"{serve.METRICS_PREFIX}{dead}-link"
        link.symlink_to(elsewhere)
        made = Path(serve.fresh_metrics_dir())
    assert made.parent == tmp_path and made.name.startswith(f"{serve.METRICS_PREFIX}{os.getpid()}-")
    assert not left.exists() and not unreaped.exists() and (running / "counter_1.db").exists()
    assert link.is_symlink() and (elsewhere / "counter_1.db").exists()  # never through a link


@contextlib.contextmanager
def exited_unreaped() -> Iterator[int]:
    """The pid of a child that has exited and is not yet reaped (a zombie) while inside."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        stat = Path(f"/proc/{child.pid}/stat")
        eventually_sync(lambda: stat.read_text().rsplit(")", 1)[1].split()[0] == "Z", within=60,
                        what="the child to exit")
        yield child.pid
    finally:
        child.wait()


def test_a_process_is_alive_until_it_exits_reaped_or_not() -> None:
    assert serve.process_alive(os.getpid())
    with exited_unreaped() as zombie:
        os.kill(zombie, 0)  # the kernel still knows it ...
        assert not serve.process_alive(zombie)  # ... but it runs nothing
    assert not serve.process_alive(zombie)
