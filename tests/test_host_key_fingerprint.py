"""A pinned host key's fingerprint (every instance row of the API carries one) is what OpenSSH's own
`ssh-keygen -l` prints for that key, for every key type a server may present; hashed from the line,
never parsed into a key."""

from __future__ import annotations

import subprocess
from pathlib import Path

import asyncssh
import pytest

from providers.host_keys import fingerprint

KEY_TYPES = ["ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "ssh-rsa"]


@pytest.mark.parametrize("alg", KEY_TYPES)
def test_fingerprint_is_what_ssh_keygen_prints(alg: str, tmp_path: Path) -> None:
    key = asyncssh.generate_private_key(alg, comment="host@example")
    line = key.export_public_key().decode().strip()
    pub = tmp_path / "key.pub"
    pub.write_text(line + "\n")
    printed = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(pub)], capture_output=True,
                             text=True, check=True, timeout=30).stdout.split()
    assert fingerprint(line) == printed[1] == key.get_fingerprint("sha256")
    assert fingerprint(line.rsplit(" ", 1)[0]) == printed[1]  # the comment is not part of the key


def test_no_line_is_none_and_a_line_without_a_key_is_refused() -> None:
    assert fingerprint(None) is None and fingerprint("") is None
    for bad in ("ssh-ed25519", "ssh-ed25519 not*base64", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI"):
        with pytest.raises(ValueError, match="not an OpenSSH public key line"):
            fingerprint(bad)
