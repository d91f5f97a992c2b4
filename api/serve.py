"""`python -m api.serve`: the API as gpuprov runs it (`gpuprov dev`, the compose file) — uvicorn on
GPUPROV_API_WORKERS processes, each its own app (`api.app:build_app`).

One process serves one request's Python at a time: the console's Cloud tab asks three lists at once,
and behind one process they queue (bench/RESULTS, the twenty-first round). Several processes on one
port share the work (each on a socket of its own, so that the kernel spreads the connections:
api/processes.py), and everything the API keeps lives in the database (sessions, idempotency keys,
the installation's id) or is a per-process cache (the offers page's answers, adapters' HTTP pools).

What is not in the database is `/metrics`' count of this API's own cloud calls (the offers pages):
each process counts its own, and a scrape reaches whichever process the kernel hands it to. So the
processes write their counters to files in one directory (prometheus-client's multiprocess mode,
PROMETHEUS_MULTIPROC_DIR), and a scrape sums them (api/routers/metrics.py). The directory is made
fresh here, before a process starts, and removed when the API stops (or, when it was killed
outright, by the next launcher on the host): a counter from an earlier run would read as this one's."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import tempfile
from pathlib import Path

# prometheus-client reads it as it is first imported, in this process (one worker) or each it spawns
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
LAUNCHER_ENV = "GPUPROV_API_LAUNCHER_PID"  # set for the processes uvicorn spawns (stop_with_launcher)
APP = "api.app:build_app"
METRICS_PREFIX = "gpuprov-api-metrics-"  # in the temp directory: <prefix><launcher pid>-<random>


def die_with_parent() -> None:
    """This process gets SIGTERM when its parent dies (Linux; elsewhere nothing)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def stop_with_launcher() -> None:
    """In an API process uvicorn spawned (build_app calls it): stop when the launcher does. uvicorn's
    processes outlive a SIGKILLed supervisor, still bound to the port, with counters in a directory
    nobody removes."""
    launcher = os.environ.get(LAUNCHER_ENV)
    if not launcher or int(launcher) == os.getpid():
        return  # not launched here, or the launcher's own process (one worker)
    die_with_parent()
    if os.getppid() != int(launcher):  # it died before we asked
        os.kill(os.getpid(), signal.SIGTERM)


def fresh_metrics_dir() -> str:
    """A new directory (mode 0700) for this launcher's processes' counters, named after its pid.
    One an earlier launcher left — killed outright, it removed nothing — goes first, once its
    launcher is gone: the service user's own directories only, never through a link."""
    for old in Path(tempfile.gettempdir()).glob(f"{METRICS_PREFIX}*"):
        pid = old.name.removeprefix(METRICS_PREFIX).split("-", 1)[0]
        with contextlib.suppress(OSError):
            if (pid.isdigit() and not process_alive(int(pid)) and not old.is_symlink()
                    and old.stat().st_uid == os.getuid()):
                shutil.rmtree(old)
    return tempfile.mkdtemp(prefix=f"{METRICS_PREFIX}{os.getpid()}-")


def process_alive(pid: int) -> bool:
    """Is process `pid` still running? A zombie is not: it has exited, and only waits for its parent
    to collect its status. Another user's process is (signalling it is refused, not unknown)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        # /proc/<pid>/stat: "pid (comm) state ...", comm may hold spaces and parentheses
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return not Path("/proc/self").exists()  # no procfs here: kill's answer stands; else it just went


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> None:
    from settings import get_settings

    parser = argparse.ArgumentParser(prog="python -m api.serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=None,
                        help="API processes (default: GPUPROV_API_WORKERS, itself 2 by default)")
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    workers = args.workers if args.workers is not None else get_settings().api_workers
    if workers < 1:
        parser.error("--workers must be at least 1")
    # A SIGTERM before uvicorn takes the signals over (or after it hands them back) still runs the
    # `finally` below: no directory left behind.
    signal.signal(signal.SIGTERM, _stop)
    metrics_dir = fresh_metrics_dir()
    os.environ[MULTIPROC_ENV] = metrics_dir
    os.environ[LAUNCHER_ENV] = str(os.getpid())
    try:
        if workers == 1:
            import uvicorn

            uvicorn.run(APP, factory=True, host=args.host, port=args.port, log_level=args.log_level)
        else:  # a socket each, not uvicorn's one shared: api/processes.py says why
            from api import processes

            try:
                code = processes.run(APP, args.host, args.port, workers, args.log_level)
            except processes.PortTaken as e:
                parser.exit(1, f"python -m api.serve: {e}\n")
            if code:
                raise SystemExit(code)
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
