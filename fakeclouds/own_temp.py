"""Temporary directories a simulation process owns, named after it: `<PREFIX><kind>-<pid>-<random>`
(mode 0700). The process removes its own as it ends (an engine's as it stops, the shims' at exit);
one it could not — it was killed outright, or timed out of its shutdown and was — goes, with what its
machines left running there, when the next process on the host makes one of its own."""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from pathlib import Path

from fakeclouds.machine_processes import remove_once_unused

PREFIX = "fakeclouds-"


def make(kind: str) -> Path:
    """A new temporary directory of this process for `kind` (one word: no `-`)."""
    _remove_left_behind()
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{kind}-{os.getpid()}-"))


@functools.cache  # once per process: its first directory's making looks, its second need not
def _remove_left_behind() -> None:
    """Remove the temporary directories of processes that are gone (`<PREFIX><kind>-<pid>-…`; this
    user's own, never through a link), killing first what their machines left running."""
    for d in Path(tempfile.gettempdir()).glob(f"{PREFIX}*-*-*"):
        owner = d.name.split("-")[2]
        with contextlib.suppress(OSError):
            if (owner.isdigit() and not Path(f"/proc/{owner}").exists() and not d.is_symlink()
                    and d.is_dir() and d.stat().st_uid == os.getuid()):
                remove_once_unused(d)
