"""`gpuprov ssh <id>`: log in to an instance with OpenSSH, its host key pinned as gpuprov pinned it.

gpuprov checks every login of its own against the host key the machine showed first (a fleet host:
the key its fleet's probe pinned). This command hands that key to OpenSSH: a temporary known_hosts
file holds the machine's line (and the bastion's, for a fleet host behind one), and ssh runs with
`StrictHostKeyChecking=yes` against that file only — a machine showing another key is refused by
ssh itself, and the user's own ~/.ssh/known_hosts is neither read for it nor written. No key known
yet (the machine not reached yet): refused, saying so, rather than trusting on first use.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.client import Api
from cli.output import fail


@dataclass(frozen=True)
class SshPlan:
    argv: list[str]  # the ssh command; its known_hosts file is the one `known_hosts` is written to
    known_hosts: str  # the file's text: the machine's line, the bastion's when there is one


class NoHostKey(Exception):
    """The instance has no pinned host key (or no SSH address) yet."""


def plan(inst: dict[str, Any], known_hosts_path: str, *, identity: str | None = None,
         options: list[str] | None = None, extra: list[str] | None = None,
         flags: list[str] | None = None) -> SshPlan:
    """The ssh argv and known_hosts text for `inst` (GET /instances/{id}); `flags` go before the
    destination (e.g. -N -L for a tunnel), `extra` after it (a command). NoHostKey when there is
    nothing to pin against."""
    ssh = inst.get("ssh")
    if not ssh:
        raise NoHostKey(f"instance {inst.get('id')} has no SSH address yet (status {inst.get('status')})")
    host_key = inst.get("host_key")
    if not host_key:
        raise NoHostKey(f"gpuprov has not seen the host key of instance {inst.get('id')} yet "
                        f"(status {inst.get('status')}): it is pinned at gpuprov's first login")
    lines = [host_key["known_hosts"]]
    argv = ["ssh", "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known_hosts_path}",
            "-o", "GlobalKnownHostsFile=/dev/null", "-o", "UpdateHostKeys=no"]
    if identity:
        argv += ["-i", identity, "-o", "IdentitiesOnly=yes"]
    for option in options or []:
        argv += ["-o", option]
    bastion = ssh.get("bastion")
    if bastion:
        if not bastion.get("host_key"):
            raise NoHostKey(f"gpuprov has not seen the host key of the bastion {bastion['host']} yet")
        lines.append(bastion["host_key"]["known_hosts"])
        argv += ["-J", f"{bastion['user']}@{bastion['host']}:{bastion['port']}"]
    argv += [*(flags or []), "-p", str(ssh["port"]), f"{ssh['user']}@{ssh['host']}", *(extra or [])]
    return SshPlan(argv=argv, known_hosts="".join(f"{line}\n" for line in lines))


def ssh(
    instance_id: str,
    identity: Annotated[Path | None, typer.Option(
        "-i", "--identity", help="private key file to log in with (default: ssh's own choice)")] = None,
    option: Annotated[list[str] | None, typer.Option(
        "-o", "--option", help="an ssh option, e.g. -o ServerAliveInterval=30 (repeatable)")] = None,
    command: Annotated[list[str] | None, typer.Argument(help="a command to run instead of a shell")] = None,
) -> None:
    """Log in to an instance with OpenSSH, its host key pinned (through the bastion for a fleet host)."""
    inst = Api().call("GET", f"/instances/{instance_id}")
    with tempfile.TemporaryDirectory(prefix="gpuprov-ssh-") as d:
        path = os.path.join(d, "known_hosts")
        try:
            p = plan(inst, path, identity=str(identity) if identity else None, options=option, extra=command)
        except NoHostKey as e:
            raise fail(f"{e}; not logging in unpinned") from None
        Path(path).write_text(p.known_hosts)
        # A child, not exec: the temporary known_hosts file is removed when ssh ends.
        code = subprocess.call(p.argv)
    raise typer.Exit(code)
