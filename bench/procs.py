"""Per-process CPU and memory read from /proc (Linux). CPU-seconds are what a process spent,
whatever else the machine runs meanwhile, so they hold on a busy box where wall time does not."""

from __future__ import annotations

import os
from pathlib import Path

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of `pid`, all threads (not its children: reaped children go to cutime)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # Fields after "(comm)", which may itself hold spaces; utime and stime are fields 14 and 15.
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S


def cpu_snapshot(pids: dict[str, int]) -> dict[str, float]:
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


def cpu_used(before: dict[str, float], pids: dict[str, int]) -> dict[str, float]:
    """CPU-seconds each process used since `before` (a cpu_snapshot of the same pids)."""
    return {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def pid_with_arg(arg: str) -> int:
    """The process that has `arg` as one of its arguments (a path unique to this run, such as the
    dev server's --db-filename): temporalio starts the dev server but does not expose its pid."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if arg.encode() in argv:
            return int(entry.name)
    raise RuntimeError(f"no process has the argument {arg!r}")
