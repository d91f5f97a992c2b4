"""A guest shutdown on a simulated machine does what its cloud does, and never touches the host:
the machine's shell finds the simulation's shims first on its PATH, the shim's record says it ran,
and this test process (on the host the machine is simulated on) is still here to check."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from api.serve import process_alive
from fakeclouds import guest_power
from fakeclouds.engine import ERROR, RUNNING, TERMINATED, Engine, Machine
from tests.fakeclouds.helpers import eventually, wait_engine

# cloud -> (instance type, region) of a cheap offer in its simulation
OFFERS = {"aws": ("g4dn.xlarge", "us-east-1a"), "local": ("cpu-small", "local-1")}


def _offer(engine: Engine, facade: str) -> tuple[str, str]:
    if facade in OFFERS:
        return OFFERS[facade]
    row = engine.offers(facade)[0]
    return row["type"].name, row["region"]


async def _boot(engine: Engine, facade: str, pubkey: str, **extra: Any) -> Machine:
    itype, region = _offer(engine, facade)
    [m] = engine.create(facade, instance_type=itype, region=region, public_keys=[pubkey],
                        name=f"dm-{facade}", extra=extra)
    await wait_engine(engine, m.id, RUNNING)
    return m


async def _run(m: Machine, key: asyncssh.SSHKey, command: str) -> asyncssh.SSHCompletedProcess | None:
    """Run `command` on m; None when the machine went down under the session (as a real one does)."""
    assert m.address and m.ssh_port
    with contextlib.suppress(asyncssh.Error, OSError):
        async with asyncssh.connect(m.address, m.ssh_port, username=m.ssh_user, client_keys=[key],
                                    known_hosts=None, agent_path=None, connect_timeout=10) as conn:
            return await conn.run(command)
    return None


async def test_the_shims_come_first_and_the_host_is_untouched(engine: Engine, pubkey: str,
                                                              ssh_key: asyncssh.SSHKey) -> None:
    m = await _boot(engine, "azure", pubkey)
    found = await _run(m, ssh_key, "for c in shutdown poweroff halt reboot systemctl sudo; do command -v $c; "
                                   "done")
    assert found is not None and found.exit_status == 0
    shims = str(guest_power.shim_dir())
    assert str(found.stdout).split() == [f"{shims}/{c}" for c in
                                    ("shutdown", "poweroff", "halt", "reboot", "systemctl", "sudo")]
    other = await _run(m, ssh_key, "systemctl restart sshd")  # not a power verb: refused, clearly
    assert other is not None and other.exit_status == 126 and "not available here" in str(other.stderr)
    refused = await _run(m, ssh_key, "sudo rm -rf /tmp/nothing-here")  # sudo lets only power through
    assert refused is not None and refused.exit_status == 126
    pid = os.getpid()
    await _run(m, ssh_key, "sudo shutdown -h now")
    await eventually(lambda: m.status == ERROR, "the Azure VM to stop")
    assert os.getpid() == pid and process_alive(pid)  # this host did not go down: the test is still here
    assert any("shutdown -h now -> poweroff" in line for line in guest_power.record(engine, m))


@pytest.mark.parametrize(("facade", "extra", "command", "status", "bills"), [
    # EC2 launched with InstanceInitiatedShutdownBehavior=terminate: gone, the bill ends.
    ("aws", {"shutdown_behavior": "terminate"}, "sudo shutdown -h now", TERMINATED, False),
    # EC2's default (stop): stopped, the instance's compute bill ends (its volume, not simulated, bills).
    ("aws", {"shutdown_behavior": "stop"}, "poweroff", ERROR, False),
    ("gcp", {}, "systemctl poweroff", ERROR, False),  # TERMINATED in GCP's words: no VM charges
    ("azure", {}, "sudo poweroff", ERROR, True),  # Stopped, still allocated: still billed
    ("digitalocean", {}, "sudo shutdown -h now", ERROR, True),  # off, still billed
    ("lambda", {}, "sudo systemctl poweroff", ERROR, True),  # bills until terminated via its API
    ("nebius", {}, "sudo shutdown -h now", RUNNING, True),  # restarted by Compute, still charged
    ("runpod", {}, 'runpodctl remove pod "$RUNPOD_POD_ID"', TERMINATED, False),  # the pod's own key
])
async def test_a_guest_shutdown_does_what_the_cloud_does(engine: Engine, pubkey: str,
                                                         ssh_key: asyncssh.SSHKey, facade: str,
                                                         extra: dict[str, str], command: str, status: str,
                                                         bills: bool) -> None:
    m = await _boot(engine, facade, pubkey, **extra)
    await _run(m, ssh_key, "setsid nohup sleep 300 >/dev/null 2>&1 </dev/null & echo $! > job")
    out = await _run(m, ssh_key, "cat job")
    assert out is not None
    job = int(str(out.stdout))
    await _run(m, ssh_key, command)
    await eventually(lambda: len(guest_power.record(engine, m)) == 1, "the shim's record")
    if status == RUNNING:  # restarted in place: what it ran is gone, it answers again
        await eventually(lambda: not process_alive(job), "the restart to end its processes")
        assert m.status == RUNNING
    else:
        await eventually(lambda: m.status == status, f"{facade} machine to be {status}")
        # Powered off: nothing of it runs on. The power-off's SIGKILL is sent before the status is set,
        # but a busy box may run the killed process's exit a moment after kill() returned.
        await eventually(lambda: not process_alive(job), "the job to die with its machine")
    first = m.billing_seconds()
    await eventually(lambda: m.billing_seconds() > first + 0.2 if bills else True, "time to pass")
    assert (m.billing_seconds() > first) == bills


async def test_a_request_is_read_only_once_whole(engine: Engine, pubkey: str, ssh_key: asyncssh.SSHKey,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The watcher polls while a shim is mid-request: it must neither act on nor drop a request it
    finds half-written (an `echo verb >> file` seen between its open and its write read as nothing,
    was removed, and the machine never powered off: the boot lease's flake on a busy box)."""
    looks = 0
    take = guest_power._take_requests

    def counted(requests: Path) -> dict[str, list[str]]:
        nonlocal looks
        looks += 1
        return take(requests)

    monkeypatch.setattr(guest_power, "_take_requests", counted)
    m = await _boot(engine, "azure", pubkey)
    home = engine.machine_home(m)
    go = home / ".go"
    os.mkfifo(go)
    # The machine's own `mv` (its ~/bin is first on its PATH) holds the request between written and
    # renamed into place until the test lets it go.
    (home / "bin").mkdir(exist_ok=True)
    held = home / "bin" / "mv"
    held.write_text('#!/bin/sh\n: > "$HOME/.paused"\nread _ < "$HOME/.go"\nexec /bin/mv "$@"\n')
    held.chmod(0o755)
    shutdown = asyncio.create_task(_run(m, ssh_key, "sudo poweroff"))
    await eventually(lambda: (home / ".paused").exists(), "the shim to reach its rename")
    seen = looks
    await eventually(lambda: looks >= seen + 3, "three looks while the request is half-done")
    requests = engine.root / guest_power.REQUESTS
    [pending] = list(requests.iterdir())
    assert pending.name.startswith(f".{m.id}.") and pending.read_text() == "poweroff\n"
    assert m.status == RUNNING
    await asyncio.to_thread(go.write_text, "\n")  # a FIFO: returns once the shim has read it
    await eventually(lambda: m.status == ERROR, "the Azure VM to stop once its request is whole")
    await shutdown
    assert list(requests.iterdir()) == []
