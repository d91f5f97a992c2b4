"""A simulated machine's disk as its image ships it: its home with a prompt, the cloud's
preinstalled tools, nvidia-smi and the NVIDIA container runtime on GPU types, k3s's kept installer
and certificates where the image has k3s."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from fakeclouds import catalog, k3s, k3s_pki, nvidia_smi, who
from fakeclouds.facade import Facade

if TYPE_CHECKING:
    from fakeclouds.engine import Machine


def prepare_home(home: Path, m: Machine, facade: Facade, itype: catalog.InstanceType) -> None:
    (home / "bin").mkdir(parents=True, exist_ok=True)
    # A prompt that names the machine (the server's own user and hostname would mislead).
    label = re.sub(r"[^A-Za-z0-9._-]", "", m.name or "") or m.id[:12]
    (home / ".bashrc").write_text(f"PS1='{m.ssh_user}@{label}:\\w\\$ '\n")
    (home / ".bash_profile").write_text("[ -f ~/.bashrc ] && . ~/.bashrc\n")
    tools = dict(facade.preinstalled)
    tools["who"] = who.SCRIPT  # SIMULATED: the machine has no utmp (fakeclouds/who.py)
    if itype.gpu is not None:
        tools["nvidia-smi"] = nvidia_smi.script_for(itype, m.id)
        # GPU images ship the NVIDIA container toolkit (Lambda Stack, the clouds' GPU images do).
        tools["nvidia-container-runtime"] = nvidia_smi.CONTAINER_RUNTIME
    for tool, script in tools.items():
        path = home / "bin" / tool
        path.write_text(script)
        path.chmod(0o700)  # run as the service's own user: nobody else's to read
    if "k3s" in tools:  # k3s as gpuprov's boot script leaves it: its installer kept (fakeclouds/k3s.py)
        kept = home / k3s.KEPT_INSTALLER
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(k3s.INSTALLER)
        k3s_pki.ensure(home / k3s.STATE / "pki")  # the image's k3s made its certificates (here: ~2 ms)
