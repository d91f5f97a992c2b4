"""The SIMULATED `who` put in every simulated machine's ~/bin: the machines have no utmp, so the
machine's SSH server (fakeclouds/ssh.py) records each open PTY session as a file under
`~/.simulated-sessions/`, and this prints one line per file, as `who` prints one per login."""

from __future__ import annotations

SESSIONS_DIR = ".simulated-sessions"

SCRIPT = r"""#!/usr/bin/env bash
# SIMULATED who, written by gpuprov's fakeclouds: lists the PTY sessions this machine's simulated
# SSH server has open (one file each under ~/.simulated-sessions), as `who` lists utmp logins.
for f in "$HOME/.simulated-sessions"/*; do
  [[ -f $f ]] && cat "$f"
done
exit 0
"""
