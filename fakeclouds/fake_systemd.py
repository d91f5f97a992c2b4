"""FAKE systemd for simulated machines: as much of it as a unit cloud-init installs needs (gpuprov's
lease timer, providers/cloudinit.py `lease_at_boot`) — `systemctl daemon-reload`, `enable [--now]`,
`start`, `is-enabled` and `is-active` for units the machine's own user data wrote, a simple service
run and restarted as its unit says, and every enabled unit started again when the machine reboots.

A simulated machine's files from cloud-init's `write_files` live under its `root` directory beside
its home (fakeclouds/machine_processes.py), never on the host: `/etc/systemd/system/x.service` is
`<machine>/root/etc/systemd/system/x.service`, and an ExecStart argument naming a file there runs
that file. Every user is the machine's one login (its home is `$HOME`). Nothing here touches the
host's systemd; a unit the machine did not install is refused like any host command.

The `systemctl` shim (guest_power.py) hands unit commands to UNITS_SHIM here: enabling is a link in
`multi-user.target.wants`, as systemd makes it; starting asks the engine (the same request file as
the power verbs, `unit-start:<unit>`), whose watcher calls `start`.
"""

from __future__ import annotations

import asyncio
import configparser
import logging
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fakeclouds.machine_processes import root_of

if TYPE_CHECKING:
    from fakeclouds.engine import Engine, Machine

log = logging.getLogger(__name__)

UNITS_SHIM = ".systemctl-units"  # in the power shims' directory (guest_power.shim_dir)
UNIT_DIR = "etc/systemd/system"  # under the machine's root
WANTS = "multi-user.target.wants"
START = "unit-start:"  # the verb the shim writes to the machine's power request file
ACTIVE = "units-active"  # beside the machine's home: one empty file per running unit (is-active)

UNITS_SCRIPT = r"""#!/bin/sh
# SIMULATED systemctl for units a simulated machine's cloud-init installed (fakeclouds/fake_systemd.py).
machine=$(dirname "$HOME")
dir="$machine/root/etc/systemd/system"
request="$(dirname "$0")/.request"  # guest_power.REQUEST_SCRIPT
cmd=; now=; units=
for a in "$@"; do
  case "$a" in
    --now) now=1 ;;
    -*) ;;
    *) if [ -z "$cmd" ]; then cmd=$a; else units="$units $a"; fi ;;
  esac
done
case "$cmd" in
  daemon-reload) exit 0 ;;
  enable|start|restart|is-enabled|is-active) [ -n "$units" ] || { echo "Too few arguments." >&2; exit 1; } ;;
  *) echo "simulated machine: systemctl $* is not available here (only poweroff, halt, reboot and" \
          "the units its user data installed)" >&2
     exit 126 ;;
esac
status=0
for u in $units; do
  case "$u" in *.*) ;; *) u="$u.service" ;; esac
  case "$u" in */*|.*) echo "Invalid unit name \"$u\"" >&2; exit 1 ;; esac
  if [ ! -f "$dir/$u" ]; then  # not this machine's: the host's own units stay out of reach
    echo "simulated machine: systemctl $cmd $u is not available here (only units its user data installed)" >&2
    exit 126
  fi
  case "$cmd" in
    enable)
      mkdir -p "$dir/multi-user.target.wants" && ln -sf "../$u" "$dir/multi-user.target.wants/$u"
      echo "Created symlink /etc/systemd/system/multi-user.target.wants/$u -> /etc/systemd/system/$u." >&2
      [ -n "$now" ] && "$request" "unit-start:$u" ;;
    start|restart) "$request" "unit-start:$u" ;;
    is-enabled)
      if [ -e "$dir/multi-user.target.wants/$u" ]; then echo enabled; else echo disabled; status=1; fi ;;
    is-active)
      if [ -e "$machine/units-active/$u" ]; then echo active; else echo inactive; status=3; fi ;;
  esac
done
exit $status
"""


@dataclass(frozen=True)
class Unit:
    exec_start: list[str]
    restart: str  # no | always | on-failure (what the lease's unit uses)
    restart_s: float


class UnitError(ValueError):
    """The unit file is not one this fake can run (or systemd would refuse it)."""


def unit_dir(engine: Engine, m: Machine) -> Path:
    return root_of(engine.machine_home(m)) / UNIT_DIR


def parse(text: str, root: Path) -> Unit:
    """A simple service's ExecStart (arguments naming a file under the machine's root run that
    file), Restart= and RestartSec=."""
    ini = configparser.ConfigParser(interpolation=None, strict=False)
    ini.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
    try:
        ini.read_string(text)
        service = ini["Service"]
    except (configparser.Error, KeyError) as e:
        raise UnitError(f"not a service unit: {e}") from None
    if service.get("Type", "simple") != "simple":
        raise UnitError(f"Type={service['Type']} is not simulated (only simple)")
    argv = shlex.split(service.get("ExecStart", ""))
    if not argv:
        raise UnitError("the unit has no ExecStart")
    argv = [str(root / a.lstrip("/")) if a.startswith("/") and (root / a.lstrip("/")).is_file() else a
            for a in argv]
    return Unit(exec_start=argv, restart=service.get("Restart", "no"),
                restart_s=float(service.get("RestartSec", "0.1").rstrip("s")))


def _key(m: Machine, name: str) -> str:
    return f"{m.id}/unit/{name}"


def start(engine: Engine, m: Machine, name: str, env: dict[str, str]) -> None:
    """Run unit `name` of m (once: a running one stays as it is), restarting it as its unit says."""
    if "/" in name or name.startswith("."):  # a unit's name, never a path (the request file is the guest's)
        log.warning("machine %s: %r is not a unit name", m.id, name)
        return
    key = _key(m, name)
    task = engine._tasks.get(key)
    if task is not None and not task.done():
        return
    try:
        unit = parse((unit_dir(engine, m) / name).read_text(), root_of(engine.machine_home(m)))
    except (OSError, UnitError) as e:
        log.warning("machine %s: unit %s not started: %s", m.id, name, e)
        return
    engine._tasks[key] = asyncio.get_running_loop().create_task(_supervise(engine, m, name, unit, env))


async def _supervise(engine: Engine, m: Machine, name: str, unit: Unit, env: dict[str, str]) -> None:
    home = engine.machine_home(m)
    active = home.parent / ACTIVE / name
    active.parent.mkdir(exist_ok=True)
    journal = home.parent / "journal.log"  # the unit's output, as `journalctl -u` would show it
    try:
        while True:
            with journal.open("ab") as out:
                proc = await asyncio.create_subprocess_exec(*unit.exec_start, cwd=home, env=env, stdout=out,
                                                            stderr=out, start_new_session=True)
            active.touch()
            code = await proc.wait()
            active.unlink(missing_ok=True)
            log.info("machine %s: unit %s exited %s", m.id, name, code)
            if unit.restart == "always" or (unit.restart == "on-failure" and code != 0):
                await asyncio.sleep(max(0.1, unit.restart_s * engine.time_scale))
                continue
            return
    finally:
        active.unlink(missing_ok=True)


def stop_all(engine: Engine, m: Machine) -> None:
    """Stop supervising m's units (before its processes are killed: a killed service must not be
    restarted on a machine going down)."""
    prefix = _key(m, "")
    for key in [k for k in engine._tasks if k.startswith(prefix)]:
        engine._tasks.pop(key).cancel()


def boot(engine: Engine, m: Machine, env: dict[str, str]) -> None:
    """Start every enabled unit of m, as systemd does at each boot."""
    wants = unit_dir(engine, m) / WANTS
    if wants.is_dir():
        for link in sorted(wants.iterdir()):
            start(engine, m, link.name, env)
