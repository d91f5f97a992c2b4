"""What clouds that run cloud-init get at boot besides the caller's own user data: k3s, for clouds
whose k3s capability is `cloud-init` (the INSTALL_K3S activity then only finds it and checks it),
and the lease's timer as a systemd service, for clouds whose self-end says `boot_timer`."""

from __future__ import annotations

from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText

import yaml

from providers.base import BootLease

# Idempotent like the SSH install (activities/k3s_setup.py): an image that has k3s keeps it.
# INSTALL_K3S_EXEC keeps the kubeconfig readable for the login user. The installer is kept in
# /var/lib/gpuprov: the SSH step runs it again with the flags only known after boot (the machine's
# public address as a TLS SAN, the NVIDIA runtime), as k3s documents changing a server's flags.
K3S_AT_BOOT = """#!/bin/sh
# gpuprov: install k3s at boot unless the image has it
if ! command -v k3s >/dev/null 2>&1; then
  mkdir -p /var/lib/gpuprov
  curl -sfL https://get.k3s.io -o /var/lib/gpuprov/k3s-install.sh \\
    && INSTALL_K3S_EXEC="--write-kubeconfig-mode 644" sh /var/lib/gpuprov/k3s-install.sh
fi
"""


def subtype(part: str) -> str:
    return "cloud-config" if part.lstrip().startswith("#cloud-config") else "x-shellscript"


def combine(*parts: str | None) -> str | None:
    """The given parts as one user data: the part alone when there is one, else a MIME multipart
    (cloud-init runs every part, in order). None when there is nothing."""
    given = [p for p in parts if p]
    if len(given) <= 1:
        return given[0] if given else None
    msg = MIMEMultipart()
    for part in given:
        msg.attach(MIMEText(part, subtype(part)))
    return msg.as_string()


def boot_parts(user_data: str | None, *, k3s: bool, lease: BootLease | None = None) -> list[str | None]:
    """k3s at boot (when asked), then the caller's own user data, then the lease's timer (last: its
    lists are appended to the caller's cloud-config, never replacing them)."""
    return [K3S_AT_BOOT if k3s else None, user_data, lease_at_boot(lease) if lease else None]


def boot_user_data(user_data: str | None, *, k3s: bool, lease: BootLease | None = None) -> str | None:
    return combine(*boot_parts(user_data, k3s=k3s, lease=lease))


LEASE_UNIT = "gpuprov-lease.service"
# The script's file name is the timer's mark (activities/lease.py TIMER_MARK): a renewal finds it in
# the process's command line and starts no second, detached timer beside the service.
LEASE_SCRIPT = "/usr/local/lib/gpuprov/gpuprov-lease-timer"

_UNIT = """[Unit]
Description=gpuprov lease: end this machine once gpuprov stops renewing its lease
After=network-online.target
# A login user the guest agent has not made yet (GCP makes it from metadata) fails the start: retry
# for as long as it takes.
StartLimitIntervalSec=0

[Service]
Type=simple
User={user}
ExecStart=/bin/sh {script}
# The script exits 0 once it has ended the machine or the lease was taken off: stay down then.
Restart=on-failure
RestartSec=30

[Install]
WantedBy=multi-user.target
"""

# cloud-init merges cloud-config parts; without this a later part's lists would replace the
# caller's write_files and runcmd (its default), or theirs ours.
_APPEND = [{"name": "list", "settings": ["append"]},
           {"name": "dict", "settings": ["no_replace", "recurse_list"]}]


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings as `|` blocks: the files read in the user data as they will on disk."""


def _str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text and not any(line != line.rstrip() for line in text.splitlines()) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_BlockDumper.add_representer(str, _str)


def lease_at_boot(lease: BootLease) -> str:
    """A cloud-config that installs the lease's timer as a systemd service, enabled and started at
    first boot (runcmd), started again at every boot after: the lease runs from boot, before gpuprov
    first logs in, and a reboot does not stop it (a detached process started over SSH would die)."""
    doc = {
        "merge_how": _APPEND,
        "write_files": [
            {"path": LEASE_SCRIPT, "permissions": "0755", "content": lease.script},
            {"path": f"/etc/systemd/system/{LEASE_UNIT}", "permissions": "0644",
             "content": _UNIT.format(user=lease.user, script=LEASE_SCRIPT)},
        ],
        "runcmd": [["systemctl", "daemon-reload"], ["systemctl", "enable", "--now", LEASE_UNIT]],
    }
    # Dumped, never formatted: the script stays one YAML block whatever it holds.
    return "#cloud-config\n" + yaml.dump(doc, Dumper=_BlockDumper, default_flow_style=False, sort_keys=False,
                                         width=1 << 20)
