"""A simulated machine's own power commands, and what its cloud does about them.

Simulated machines run real shells on the host, so `shutdown`, `poweroff`, `halt`, `reboot`,
`systemctl poweroff|halt|reboot` and `sudo` in front of them must never reach the host's own. Every
machine's PATH has `shim_dir()` right after its `~/bin` (fakeclouds/ssh.py): each shim there only
writes a request file outside the machine's home (`<root>/power-requests/<machine id>@<time>`)
and a line to the machine's `power.log` (what a test asserts ran). The engine's watcher
(`watch`) picks requests up and applies that cloud's documented semantics (its facade's
`guest_shutdown`): a guest shutdown on EC2 with InstanceInitiatedShutdownBehavior=terminate
terminates the machine, on Azure it leaves a stopped machine that still bills, on Nebius the cloud
restarts it and keeps billing.
`runpodctl remove pod` / `vastai destroy instance` are the machine-scoped API calls those clouds'
machines end themselves with (providers' `SelfEnd`), simulated the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from fakeclouds import fake_systemd, shim_dirs
from fakeclouds.machine_processes import power_off

if TYPE_CHECKING:
    from fakeclouds.engine import Engine, Machine

log = logging.getLogger(__name__)

POLL_S = 0.1  # how often the watcher looks for requests (one directory listing per engine)
REQUESTS = "power-requests"  # under the engine's root: one file per request (REQUEST_SCRIPT)
RECORD = "power.log"  # beside the machine's home: every shim run, kept for tests and people
TASK_KEY = "guest-power-watch"  # the watcher's entry in the engine's tasks (stop() cancels it)
STOPPED = "stopped by a guest shutdown"

# What a guest poweroff does on a cloud is its facade's `guest_shutdown` (reboot always restarts in
# place, still billing):
#   terminate     - the machine is gone and its bill ends
#   stop_compute  - stopped: its compute bill ends; it stays listed (disks, not simulated, still bill)
#   stop_billing  - stopped (or "off") but still allocated: it keeps billing until terminated
#   restart       - the cloud counts it as a failure and restarts it: it keeps running and billing
Effect = Literal["terminate", "stop_compute", "stop_billing", "restart"]
EFFECTS: tuple[Effect, ...] = ("terminate", "stop_compute", "stop_billing", "restart")


SHIM = r"""#!/bin/sh
# SIMULATED guest power command, written by gpuprov's fakeclouds (fakeclouds/guest_power.py): the
# host this machine is simulated on must not go down; the simulation does what the cloud would.
name=$(basename "$0")
shims=$(dirname "$0")
case "$name" in
  sudo)  # only the power commands get through; everything else is refused like the host guard's
    while [ $# -gt 0 ]; do
      case "$1" in -u|-g|-p|-C|-h) shift 2 ;; --) shift; break ;; -*) shift ;; *) break ;; esac
    done
    [ $# -gt 0 ] || { echo "usage: sudo command" >&2; exit 1; }
    if [ -x "$shims/$1" ] && [ "$1" != sudo ]; then cmd=$1; shift; exec "$shims/$cmd" "$@"; fi
    echo "simulated machine: sudo is not available here (it would run on the host)" >&2  # as the guard says
    exit 126 ;;
  shutdown)
    verb=poweroff
    for a in "$@"; do
      case "$a" in
        -r|--reboot) verb=reboot ;;
        -c) echo "simulated machine: no shutdown scheduled" >&2; exit 1 ;;
      esac
    done ;;
  poweroff|halt|reboot) verb=$name ;;
  systemctl)
    verb=
    for a in "$@"; do
      case "$a" in -*) ;; poweroff|halt|reboot) verb=$a; break ;; *) break ;; esac
    done
    # Anything else: the units this machine's user data installed (fakeclouds/fake_systemd.py)
    [ -n "$verb" ] || exec "$shims/.systemctl-units" "$@" ;;
  *)  # a cloud's CLI: the machine-scoped API call that ends this machine (runpodctl remove pod ID)
    case "$1" in
      remove|destroy|delete|terminate) verb="api-end:$name" ;;
      *) echo "simulated machine: $name $* is not simulated (only the call that ends this machine)" >&2
         exit 126 ;;
    esac ;;
esac
echo "$(date +%s) $name $* -> $verb" >> "$(dirname "$HOME")/power.log"
"$shims/.request" "$verb" || exit 1
echo "simulated machine: $verb requested; the simulated cloud acts on it" >&2
exit 0
"""

# Hands one request (a power verb, or fake_systemd's unit-start:<unit>) to the watcher. A request
# is written whole to a dot-file and renamed into place: the watcher reads only renamed files, so it
# never reads (and removes) one a shell has opened but not yet written — `echo >> file` could be
# seen empty in between, and the request was lost. The name orders a machine's requests by time.
REQUEST_SCRIPT = r"""#!/bin/sh
# SIMULATED: hands a request to gpuprov's fakeclouds (fakeclouds/guest_power.py).
machine=$(dirname "$HOME")
requests=$(dirname "$(dirname "$machine")")/power-requests
if [ ! -d "$requests" ]; then
  echo "simulated machine: no simulation is listening here" >&2
  exit 1
fi
id=$(basename "$machine")
printf '%s\n' "$@" > "$requests/.$id.$$" && mv -f "$requests/.$id.$$" "$requests/$id@$(date +%s%N).$$"
"""

POWER = ("shutdown", "poweroff", "halt", "reboot", "systemctl", "sudo")
REQUEST_SHIM = ".request"  # in shim_dir(): REQUEST_SCRIPT, which the shims above and fake_systemd's call


@functools.cache
def shim_dir() -> Path:
    """The directory (made once per process; shim_dirs.py says where) holding the power shims
    (`watch` adds the CLIs of an engine's clouds whose machines end themselves through their API)."""
    d = shim_dirs.make("power")
    for name in POWER:
        _write_shim(d / name)
    _write_shim(d / fake_systemd.UNITS_SHIM, fake_systemd.UNITS_SCRIPT)
    _write_shim(d / REQUEST_SHIM, REQUEST_SCRIPT)
    return d


def _write_shim(path: Path, script: str = SHIM) -> None:
    shim_dirs.write_script(path, script)


def record(engine: Engine, m: Machine) -> list[str]:
    """The machine's power log: one line per shim run (what tests check instead of the host)."""
    try:
        return (engine.machine_home(m).parent / RECORD).read_text().splitlines()
    except OSError:
        return []


def effect(engine: Engine, m: Machine, verb: str) -> Effect | None:
    """What `verb` from inside `m` does on m's cloud; None: nothing (not this cloud's tool)."""
    facade = engine.facades[m.facade]
    if verb == "reboot":
        return "restart"
    if verb.startswith("api-end:"):  # only this cloud's own CLI, with the key it gives its machines
        return "terminate" if facade.api_self_end == verb.removeprefix("api-end:") else None
    if m.extra.get("shutdown_behavior") == "terminate":  # EC2's InstanceInitiatedShutdownBehavior
        return "terminate"
    found = facade.guest_shutdown
    return found if found in EFFECTS else "stop_billing"  # type: ignore[return-value]


def watch(engine: Engine) -> None:
    """Start the engine's watcher once (called as a machine starts listening)."""
    (engine.root / REQUESTS).mkdir(parents=True, exist_ok=True)
    for f in engine.facades.values():
        if f.api_self_end and not (shim_dir() / f.api_self_end).exists():
            _write_shim(shim_dir() / f.api_self_end)
    task = engine._tasks.get(TASK_KEY)
    if task is None or task.done():
        engine._tasks[TASK_KEY] = asyncio.get_running_loop().create_task(_watch(engine))


async def _watch(engine: Engine) -> None:
    from fakeclouds.engine import PENDING, RUNNING

    requests = engine.root / REQUESTS
    while True:
        await asyncio.sleep(POLL_S)
        if not any(m.status in (PENDING, RUNNING) for m in engine.machines.values()):
            engine._tasks.pop(TASK_KEY, None)  # the next machine to listen starts it again
            return
        for machine_id, verbs in _take_requests(requests).items():
            m = engine.machines.get(machine_id)
            if m is None or m.status != RUNNING or not verbs:
                continue
            start = fake_systemd.START
            units = [v.removeprefix(start) for v in verbs if v.startswith(start)]
            power = [v for v in verbs if not v.startswith(start)]
            try:
                for unit in units:
                    fake_systemd.start(engine, m, unit, engine.machine_env(m))
                if power:
                    await apply(engine, m, power[-1])
            except Exception:  # one machine's request must not stop the watch for all
                log.exception("guest power request of %s failed", m.id)


def _take_requests(requests: Path) -> dict[str, list[str]]:
    """The verbs each machine has asked for since the last look, oldest first; their files removed.
    A dot-file is a request still being written (REQUEST_SCRIPT renames it into place once whole)."""
    found: list[tuple[str, int, Path]] = []
    with contextlib.suppress(FileNotFoundError):
        for entry in requests.iterdir():
            if not entry.name.startswith("."):
                machine_id, _, when = entry.name.rpartition("@")  # <id>@<nanoseconds>.<pid>
                found.append((machine_id or entry.name, _nanoseconds(when), entry))
    taken: dict[str, list[str]] = {}
    for machine_id, _, entry in sorted(found):
        with contextlib.suppress(FileNotFoundError):
            verbs = entry.read_text().split()
            entry.unlink()
            taken.setdefault(machine_id, []).extend(verbs)
    return taken


def _nanoseconds(when: str) -> int:
    head = when.partition(".")[0]
    return int(head) if head.isdigit() else 0


async def apply(engine: Engine, m: Machine, verb: str) -> None:
    """Do what m's cloud does when m runs `verb` (poweroff, halt, reboot, api-end:<its CLI>)."""
    from fakeclouds.engine import ERROR

    what = effect(engine, m, verb)
    log.info("machine %s (%s): guest %s -> %s", m.id, m.facade, verb, what)
    if what is None:
        return
    home = engine.machine_home(m)
    fake_systemd.stop_all(engine, m)  # before the power-off: a killed service is not restarted
    if what == "restart":  # everything it ran is gone; it comes back on the same address
        power_off(home)
        fake_systemd.boot(engine, m, engine.machine_env(m))  # its enabled units start again
        return
    engine._cancel(m)
    if what == "terminate":
        await engine._gone(m)
        return
    await engine._stop_ssh(m)
    power_off(home)
    m.status, m.detail = ERROR, STOPPED
    if what == "stop_compute":
        m.ended_at = time.time()  # its compute bill ends here (Machine.billing_seconds)
    engine.save()
