"""The real OpenSSH client, as a user logs in to a machine: `ssh -i KEY -p 22 ubuntu@HOST CMD`,
never an agent, never asking (BatchMode), no host key kept."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def openssh(key: Path, host: str, command: str, *, user: str = "ubuntu",
            port: int = 22) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ssh", "-i", str(key), "-p", str(port), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
         "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10",
         f"{user}@{host}", command],
        capture_output=True, text=True, timeout=30, check=False, env={**os.environ, "SSH_AUTH_SOCK": ""},
    )
