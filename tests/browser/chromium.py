"""Debian's chromium for the console's browser tests: installed by the tests themselves when missing
(as root, `apt-get update` once first), never a browser build downloaded by a test tool. Playwright
drives it through `executable_path`."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
LOCK = Path("/tmp/gpuprov-chromium-install.lock")  # xdist workers install it once between them

# Chromium on a closed network: nothing of its own goes out (no component updates, no sync, no
# QUIC probes, no DNS lookups: every name maps to "not found"; the pages are on 127.0.0.1).
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-features=MediaRouter,OptimizationHints,Translate",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]


class ChromiumMissing(RuntimeError):
    pass


def ensure() -> str:
    """The chromium binary, installed from Debian's packages first if missing."""
    if os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    with LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.access(CHROMIUM, os.X_OK):  # another worker installed it while this one waited
            return CHROMIUM
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            raise ChromiumMissing(f"{CHROMIUM} is missing: install Debian's chromium package "
                                  "(apt-get install chromium) to run the console's browser tests")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in (["apt-get", "update", "-q"],
                    ["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"]):
            done = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise ChromiumMissing(f"{' '.join(cmd)} failed: {done.stderr.strip()[-500:]}")
    return CHROMIUM
