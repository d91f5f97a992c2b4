"""What clouds that run cloud-init get at boot besides the caller's own user data: k3s, for clouds
whose k3s capability is `cloud-init` (the INSTALL_K3S activity then only finds it and checks it)."""

from __future__ import annotations

from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText

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


def boot_user_data(user_data: str | None, *, k3s: bool) -> str | None:
    """k3s at boot (when asked), then the caller's own user data."""
    return combine(K3S_AT_BOOT if k3s else None, user_data)
