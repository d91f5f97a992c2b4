"""One `gpuprov dev` run shared by the suite's end-to-end files, on the worker that runs the stacks
lane (tests/tiers.py): the console's browser tests (tests/browser/) first, then the make-run checks
(tests/e2e/test_make_run.py), whose last test stops it and restarts it on the same home. Each start
costs a Temporal dev server, the simulation, a worker, the API and a ConnectWorkflow per simulated
cloud (about 35 s of the lane and as much CPU): sharing one saves a start. The files that share it
leave what they made removed (connections, fleets, policies, jobs, instances), so the make-run
checks still find exactly what `gpuprov dev` connected."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import asyncssh

from tests.devrun import DevRun, dev_ports
from tests.test_new_cloud import plugin_env


def user_key(tmp: Path) -> tuple[Path, Path]:
    key = asyncssh.generate_private_key("ssh-ed25519", comment="user@test")
    private = tmp / "id_ed25519"
    private.write_bytes(key.export_private_key())
    private.chmod(0o600)
    public = tmp / "id_ed25519.pub"
    public.write_bytes(key.export_public_key())
    return private, public


@dataclass
class SharedDev:
    """The run: where it listens, its token, the user's SSH key."""

    run: DevRun
    home: Path
    ports: dict[str, int]
    token: str
    private: Path
    public: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports['GPUPROV_API_PORT']}"

    def alive(self) -> bool:
        return self.run.proc.poll() is None


def start(tmp: Path) -> SharedDev:
    """`gpuprov dev` with the plugin cloud on its PYTHONPATH; the simulated clouds' documented rate
    limits stay on, 100x faster than real (Lambda: a launch per 0.12 s). A running job's GPUs are
    sampled every 3 s, not 30: the console's job detail charts a sample the test waits for."""
    private, public = user_key(tmp)
    home, ports = tmp / "home", dev_ports()
    run = DevRun(home, ports, extra_env={"GPUPROV_DEV_CLOUD_TIME_SCALE": "0.01",
                                         "GPUPROV_JOB_METRICS_INTERVAL_S": "3",
                                         "PYTHONPATH": plugin_env()["PYTHONPATH"]})
    try:
        token = run.wait_for(r"^\s*API token\s+(\S+)").group(1)  # printed once every cloud is connected
    except BaseException:
        run.interrupt()
        raise
    return SharedDev(run, home, ports, token, private, public)
