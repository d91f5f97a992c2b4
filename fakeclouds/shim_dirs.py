"""Where the simulation's command shims live: guest_power's power commands (shutdown, sudo, …) and
host_guard's refusals, which come before the host's own commands on every simulated machine's PATH.

A persisted simulation (`--state-dir`, as `gpuprov dev` runs it) keeps them in its state directory:
its machines outlive the simulation process (a VM outlives its cloud's API), and so do their
detached processes (a lease timer, a job), whose PATH must keep finding the shims — in a temporary
directory removed under them, a machine's `sudo shutdown` would reach the host's own. Otherwise
(tests' in-process clouds, which power their machines off as they stop) a fresh temporary
directory per process (fakeclouds/own_temp.py), removed as the process exits — after whatever
still runs on a PATH through it is killed (machine_processes.remove_once_unused): nothing is left
running to find the host's commands in its place. A process killed outright runs no exit handler:
its directories (named after its pid) go, the same way, when the next process makes its own."""

from __future__ import annotations

import atexit
from pathlib import Path

from fakeclouds import own_temp
from fakeclouds.machine_processes import remove_once_unused

_base: Path | None = None


def keep_in(base: Path) -> None:
    """Keep every shim directory made from now on under `base` (call before any machine starts)."""
    global _base
    _base = base


def make(kind: str) -> Path:
    """The directory for shims of `kind`: `<base>/<kind>` when kept (the same across restarts),
    else a new temporary one."""
    if _base is None:
        d = own_temp.make(kind)
        atexit.register(remove_once_unused, d)
    else:
        d = _base / kind
        d.mkdir(parents=True, exist_ok=True)
    d.chmod(MODE)  # whatever the umask, and a kept directory made before the mode was 0700
    return d


# The machines' shells run as the simulation's own user: nobody else needs to read or run a shim
# (and a persisted cloud's state dir holds nothing others may read: `gpuprov dev`'s home is private).
MODE = 0o700


def write_script(path: Path, script: str) -> None:
    """Write an executable script whole or not at all: a shell running the one it replaces (a
    restart rewrites them) never reads half of it."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(script)
    tmp.chmod(MODE)
    tmp.replace(path)
