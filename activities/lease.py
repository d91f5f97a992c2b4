"""The dead-man switch on every leased cloud machine (issue 25, part 3).

A machine carries a lease: `~/.gpuprov/lease` holds the time it runs out, in epoch seconds of the
machine's own clock (so the control plane's clock never matters). The watch renews it each round in
the SSH login it already makes (activities/idle.py `_read`: the renewal rides in front of the
sample command, no extra login); the allocation's last SSH step before ready (the GPU check)
writes it first and starts the machine's own timer unless one runs: a `sh` loop that, once the
lease has run out, runs the cloud's self-end command
(`Capabilities.self_end.command`: `sudo shutdown -h now` where a guest shutdown ends the bill, the
machine-scoped API call where that is the way). If gpuprov's database or Temporal is lost, nobody
renews, and the machine ends itself.

Where the cloud runs cloud-init (`SelfEnd.boot_timer`: AWS, GCP) the create puts the timer in the
user data as a systemd service (`at_boot`, providers/cloudinit.py `lease_at_boot`): it writes the
first lease at boot, so a machine whose control plane is lost before it is ever ready still ends,
and systemd starts it again after a reboot. Elsewhere the renewal starts it as a detached process
over SSH (`setsid nohup`): a reboot kills that one, and the next renewal starts it again. Clouds
whose self-end is "none" or "n/a" get no lease: nothing on the machine could end the bill there
(the allocation shows `self_end`), and a user's own fleet host is never leased.

Scaled time for tests: GPUPROV_LEASE_HOUR_S (seconds in a lease hour, default 3600) and
GPUPROV_LEASE_POLL_S (how often the timer looks, default 60 s).
"""

from __future__ import annotations

import os
import shlex

from providers import registry
from providers.base import BootLease, CloudProvider, SelfEnd
from providers.ssh_fleet import SshFleetProvider
from store.models import Instance

DIR = "$HOME/.gpuprov"  # on the machine, in the login user's home
HOUR_S_ENV, POLL_S_ENV = "GPUPROV_LEASE_HOUR_S", "GPUPROV_LEASE_POLL_S"
TIMER_MARK = "gpuprov-lease-timer"  # in the timer's command line: how a renewal knows it runs
# What a renewal that could not write the lease (or start the timer) says on stderr: the sample's
# stdout stays as it was, and the watch counts it (activities/idle.py, metrics.lease_not_renewed).
NOT_RENEWED = "gpuprov-lease: not renewed"


def hour_s() -> float:
    return float(os.environ.get(HOUR_S_ENV, "3600"))


def poll_s() -> float:
    return float(os.environ.get(POLL_S_ENV, "60"))


def leased(p: CloudProvider, row: Instance) -> bool:
    """Whether the row's machine carries a lease: a cloud machine (never a fleet host) with a lease
    asked for, on a cloud where the machine can end its own bill."""
    if isinstance(p, SshFleetProvider) or not row.lease_hours:
        return False
    return p.capabilities.self_end.method in ("shutdown", "api")


def _lease_seconds(hours: float, hour: float | None = None) -> int:
    return max(1, round(hours * (hour_s() if hour is None else hour)))


def timer_script(self_end: SelfEnd, poll: float) -> str:
    """The machine's own timer: wait for the lease to run out, then end the machine. A lease file
    gone or unreadable ends the timer (the lease was taken off), never the machine. It begins with
    TIMER_MARK, a no-op that names it in its process's command line (`renew_command` checks it)."""
    return (f': {TIMER_MARK}; d="{DIR}"; while :; do exp=$(cat "$d/lease" 2>/dev/null); '
            'case "$exp" in ""|*[!0-9]*) rm -f "$d/lease-timer.pid"; exit 0 ;; esac; '
            'if [ "$(date +%s)" -ge "$exp" ]; then '
            'echo "$(date +%s) the lease ran out: ending this machine" >> "$d/lease.log"; '
            f"{self_end.command}; exit 0; fi; sleep {poll:g}; done")


def boot_script(hours: float, self_end: SelfEnd, *, hour: float | None = None,
                poll: float | None = None) -> str:
    """The timer as systemd runs it at every boot (as the login user, so `$HOME` is the login's):
    the first boot writes the first lease, unless a renewal already has; it records its pid, so a
    renewal sees a timer running and starts no detached one; then the same loop as over SSH. Its
    file is named after TIMER_MARK (providers/cloudinit.py LEASE_SCRIPT)."""
    seconds = _lease_seconds(hours, hour)
    return ("#!/bin/sh\n"
            "# gpuprov's lease timer (activities/lease.py): ends this machine once its lease runs out\n"
            f'd="{DIR}"\n'
            'mkdir -p "$d" || exit 1\n'
            'if [ ! -e "$d/lease" ] && [ ! -e "$d/boot-lease" ]; then\n'
            f'  echo $(( $(date +%s) + {seconds} )) > "$d/lease.new" || exit 1\n'
            '  mv "$d/lease.new" "$d/lease" || exit 1\n'
            "fi\n"
            'date +%s > "$d/boot-lease"\n'
            'echo $$ > "$d/lease-timer.pid"\n'
            f"{timer_script(self_end, poll_s() if poll is None else poll)}\n")


def _self_end_of(cloud: str) -> SelfEnd | None:
    """How a leased machine on `cloud` ends itself; None: it carries no lease (a fleet host, a cloud
    where nothing on the machine ends its bill)."""
    if registry.is_fleet(cloud):
        return None
    self_end = registry.capabilities(cloud).self_end
    return self_end if self_end.method in ("shutdown", "api") else None


def at_boot(cloud: str, hours: float | None) -> BootLease | None:
    """The timer a create puts in the machine's user data: for a leased allocation on a cloud whose
    machines run cloud-init (SelfEnd.boot_timer); None elsewhere (the renewal at ready starts it)."""
    if not hours:
        return None
    self_end = _self_end_of(cloud)
    if self_end is None or not self_end.boot_timer:
        return None
    return BootLease(user=registry.capabilities(cloud).login_user, script=boot_script(hours, self_end))


def renew_command(hours: float, self_end: SelfEnd, *, hour: float | None = None,
                  poll: float | None = None) -> str:
    """Renew the lease to `hours` from now on the machine's clock, and start its timer unless it
    runs. It rides in front of another command's: its own output goes nowhere, but a failure says
    NOT_RENEWED on stderr."""
    seconds = _lease_seconds(hours, hour)
    timer = shlex.quote(timer_script(self_end, poll_s() if poll is None else poll))
    return (f'{{ d="{DIR}"; mkdir -p "$d" && echo $(( $(date +%s) + {seconds} )) > "$d/lease.new" '
            '&& mv "$d/lease.new" "$d/lease" && '
            # The timer runs if the recorded pid is alive *and* is the timer: after a reboot (or
            # the timer killed) the pid may belong to any other process by now.
            '{ { p=$(cat "$d/lease-timer.pid" 2>/dev/null) && [ -n "$p" ] && '
            f'grep -qa {TIMER_MARK} "/proc/$p/cmdline" 2>/dev/null; }} || '
            f"{{ setsid nohup sh -c {timer} >/dev/null 2>&1 </dev/null & "
            'echo $! > "$d/lease-timer.pid"; }; }; '
            f'}} >/dev/null 2>&1 || echo "{NOT_RENEWED}" >&2; ')


def command_for(p: CloudProvider, row: Instance) -> str:
    """What the watch's sample login runs before the sample: the renewal, or nothing."""
    if not leased(p, row):
        return ""
    assert row.lease_hours is not None
    return renew_command(row.lease_hours, p.capabilities.self_end)


def command_at_ready(row: Instance | None) -> str:
    """The lease's first writing, in the allocation's last SSH step before ready (activities/ssh.py
    PROBE_GPUS, in the login it already holds): the lease runs from ready, not from the watch's
    first round after it. Nothing for a fleet host, a lease turned off, or a cloud where nothing on
    the machine can end its bill."""
    if row is None or not row.lease_hours:
        return ""
    self_end = _self_end_of(row.provider)
    return renew_command(row.lease_hours, self_end) if self_end is not None else ""
