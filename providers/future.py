"""Providers the studio's connect grid lists that gpuprov has NO adapter for yet (none today: Oracle
Cloud's is providers/oci.py), and the SSH / on-prem fleet form (fleets are not connections:
/api/compute/fleets keeps them).

Each is a typed credentials model like an adapter's (providers/credentials.py), so the catalog shows
its form exactly as it will be asked for, but nothing here connects, verifies or launches: a
connection naming one is refused with "<name> is not supported yet" (api/fields.py). When an
adapter lands, its `CloudEntry` goes into the registry and its entry here goes away.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import SecretStr

from providers.credentials import Credentials, field


class SshFleetCredentials(Credentials):
    """The SSH / on-prem form: the user's own hosts, reached with a pasted key, optionally through a
    bastion (proxy jump) with its own host, port, user and key. A fleet, not a connection."""

    ssh_user: str = field("SSH user", default="ubuntu", min_length=1, max_length=64)
    ssh_port: int = field("SSH port", default=22, ge=1, le=65535, max_length=None)
    private_key: SecretStr = field("Private key", "secret", min_length=1, max_length=20_000,
                                   help="pasted (OpenSSH or PEM); kept encrypted, never shown again")
    hosts: str = field("Hosts", min_length=1, max_length=10_000,
                       help="one hostname or IP address per line")
    bastion_host: str | None = field("Bastion host", default=None, max_length=255,
                                     help="optional proxy jump")
    bastion_port: int = field("Bastion port", default=22, ge=1, le=65535, max_length=None)
    bastion_user: str | None = field("Bastion user", default=None, max_length=64,
                                     help="the SSH user when empty")
    bastion_private_key: SecretStr | None = field("Bastion private key", "secret", default=None,
                                                  max_length=20_000, help="the hosts' key when empty")


@dataclass(frozen=True)
class FutureProvider:
    """A provider the connect grid lists without an adapter here."""

    key: str
    name: str
    tagline: str
    how_to_connect: str
    credentials_model: type[Credentials]
    reason: str  # why it cannot be connected today
    billed: bool = True  # the "billed to your account" note applies


# The SSH / on-prem card's key: fleets (store/models.py Fleet) list under it on the providers page.
SSH_FLEET = "ssh"

FUTURE: dict[str, FutureProvider] = {
    p.key: p for p in (
        FutureProvider(
            SSH_FLEET, "SSH / On-prem", "Bring your own GPU servers",
            "Give the SSH user, port and a private key (pasted) that logs in to every host, the hosts one "
            "per line, and a bastion (proxy jump) if the hosts are only reachable through one. Hosts need "
            "Docker pre-installed; on GPU hosts CUDA 12.1 + the NVIDIA Container Toolkit; passwordless sudo; "
            "AllowTcpForwarding yes in sshd_config; a firewall allowing SSH.",
            SshFleetCredentials,
            "SSH / On-prem is not supported yet as a connection: fleets are saved and probed through "
            "POST /api/compute/fleets, and `gpuprov up --cloud ssh` allocates onto their free hosts",
            billed=False),
    )
}


def not_supported(key: str) -> str | None:
    """Why `key` cannot be connected ("Modal is not supported yet: …"), or None if it is not a
    listed future provider."""
    found = FUTURE.get(key)
    return found.reason if found else None
