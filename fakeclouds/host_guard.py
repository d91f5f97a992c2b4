"""Commands a simulated machine must never run on the host it is simulated on.

Simulated machines run real shells as the simulation's own user (root in CI). A script written for
a real machine — gpuprov's k3s step installing the NVIDIA toolkit with `sudo apt-get`, a guest
`shutdown` — would change the host itself. Every simulated machine's PATH has this directory right
after its own `~/bin` (where a machine's simulated tools, which win, live): each command here
refuses, saying it is on a simulated machine, and changes nothing.
"""

from __future__ import annotations

import functools
from pathlib import Path

from fakeclouds import shim_dirs

REFUSED = ("sudo", "su", "apt", "apt-get", "dpkg", "yum", "dnf", "systemctl", "service",
           "shutdown", "poweroff", "reboot", "halt", "init")

SCRIPT = """#!/bin/sh
# SIMULATED machine guard, written by gpuprov's fakeclouds: this command would change the host.
echo "simulated machine: $(basename "$0") is not available here (it would run on the host)" >&2
exit 126
"""


@functools.cache
def guard_dir() -> Path:
    """The directory (made once per process; shim_dirs.py says where) holding a refusing script
    for each of REFUSED."""
    d = shim_dirs.make("guard")
    for name in REFUSED:
        shim_dirs.write_script(d / name, SCRIPT)
    return d
