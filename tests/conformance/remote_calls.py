"""The remote calls each adapter makes, recorded at its simulation during conformance and pinned.

tests/conformance/remote_calls/<cloud>.json holds, per conformance check, the names of the calls the
simulation served while the check ran (fakeclouds/calls.py names them: "GET /instances/{id}",
"ec2:RunInstances", "nebius.compute.v1.InstanceService/Create"). Each conformance test compares
what it just saw with its entry, so an SDK upgrade or an adapter change that makes different calls
fails there, with the difference, instead of passing against a simulation that happens to answer.

When a change to the calls is meant (a new verb, a pinned SDK upgraded), record them again and
review the diff like code:

    GPUPROV_RECORD_CALLS=1 .venv/bin/pytest -n 0 tests/conformance/test_conformance.py -k test_conformance

Recording rewrites only the entries of the checks that ran (a `-k` subset leaves the rest alone).

Docker has no simulation: its checks run against a real engine (tests/docker_/test_docker.py), whose
fault proxy names the calls the same way ("GET /containers/{id}/json"); record them with

    GPUPROV_RECORD_CALLS=1 .venv/bin/pytest tests/docker_ -k "conformance or lost_create_answer"

A call that a check makes or not depending on what ran before it in the same process (an SDK that
caches a lookup per process) or on timing it does not control is listed, with why, under the file's
`"_sometimes"`: such a call is neither required nor refused in any check. Keep that list short — each
entry is a call an upgrade could change unnoticed.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

from providers import registry

PINNED = Path(__file__).resolve().parent / "remote_calls"
RECORD = "GPUPROV_RECORD_CALLS"
SOMETIMES = "_sometimes"


def named(seen: dict[str, list[str]], cloud: str) -> list[str]:
    """The calls of one check: the cloud's own facade by name, any other facade it reached prefixed
    with that facade's name (e.g. a token service served apart)."""
    calls = set(seen.get(cloud, ()))
    calls |= {f"{facade}: {c}" for facade, cs in seen.items() if facade != cloud for c in cs}
    return sorted(calls)


def pinned(cloud: str) -> dict[str, list[str]]:
    path = PINNED / f"{cloud}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def compare(cloud: str, check: str, seen: list[str]) -> None:
    """Assert `seen` is the pinned list of (cloud, check), or record it when GPUPROV_RECORD_CALLS is set."""
    if os.environ.get(RECORD):
        _record(cloud, check, seen)
        return
    if cloud not in {e.id for e in registry.BUILTIN}:
        return  # a plugin's cloud (an entry point): its remote calls are its own repository's to pin
    entries = pinned(cloud)
    want = entries.get(check)
    assert want is not None, (
        f"no remote calls pinned for {cloud}/{check}: record them ({RECORD}=1, see {__name__})")
    sometimes = set(entries.get(SOMETIMES, {}))
    added = sorted(set(seen) - set(want) - sometimes)
    dropped = sorted(set(want) - set(seen) - sometimes)
    assert not added and not dropped, (
        f"{cloud}'s adapter made different remote calls in {check}: new {added}, no longer {dropped}. "
        f"If that is meant, record them again ({RECORD}=1, see {__name__}) and review the diff.")


def _record(cloud: str, check: str, seen: list[str]) -> None:
    PINNED.mkdir(exist_ok=True)
    path = PINNED / f"{cloud}.json"
    with open(PINNED / ".lock", "w") as lock:  # xdist workers may record side by side
        fcntl.flock(lock, fcntl.LOCK_EX)
        entries: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        sometimes = set(entries.get(SOMETIMES, {}))
        entries[check] = [c for c in seen if c not in sometimes]
        path.write_text(json.dumps(dict(sorted(entries.items())), indent=1) + "\n")
