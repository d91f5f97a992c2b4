"""The simulated Compute Engine's own state beside the engine's machines: operations, the request
ids they answered, and firewall rules. Kept per engine, written to `<engine root>/gcp.json` on every
change (the engine's state dir when it persists, else its scratch dir), read back on start.
"""

from __future__ import annotations

import itertools
import json
import secrets
import time
import weakref
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fakeclouds.engine import TERMINATED, Engine

API = "https://www.googleapis.com/compute/v1"
# How long operations (and the requestIds that name them) are kept. Google's APIs promise to
# recognise a repeated request id for "at least 60 minutes" [unconfirmed for Compute Engine].
RETENTION_S = 3600.0


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def numeric_id() -> str:
    """A resource id as Compute Engine's: a decimal uint64."""
    return str(10**18 + secrets.randbelow(9 * 10**18))


@dataclass
class Operation:
    name: str
    project: str
    zone: str | None  # None: a global operation
    operation_type: str  # insert / delete
    target_link: str
    user: str
    inserted_at: float
    done_at: float | None  # None: done when `machine_id` is gone (a delete)
    id: str = field(default_factory=numeric_id)
    target_id: str | None = None
    machine_id: str | None = None
    error: dict[str, Any] | None = None  # {"errors": [{"code", "message"}]}
    http_status: int | None = None
    http_message: str | None = None

    def done(self, engine: Engine, now: float) -> bool:
        if self.done_at is not None:
            return now >= self.done_at
        m = engine.machines.get(self.machine_id or "")
        return m is None or m.status == TERMINATED

    def to_json(self, engine: Engine, now: float | None = None) -> dict[str, Any]:
        now = time.time() if now is None else now
        done = self.done(engine, now)
        scope = f"zones/{self.zone}" if self.zone else "global"
        out: dict[str, Any] = {
            "kind": "compute#operation",
            "id": self.id,
            "name": self.name,
            "operationType": self.operation_type,
            "targetLink": self.target_link,
            "status": "DONE" if done else "RUNNING",
            "user": self.user,
            "progress": 100 if done else 0,
            "insertTime": rfc3339(self.inserted_at),
            "startTime": rfc3339(self.inserted_at),
            "selfLink": f"{API}/projects/{self.project}/{scope}/operations/{self.name}",
        }
        if self.zone:
            out["zone"] = f"{API}/projects/{self.project}/zones/{self.zone}"
        if self.target_id:
            out["targetId"] = self.target_id
        if done:
            out["endTime"] = rfc3339(max(self.inserted_at, self.done_at or now))
            if self.error:
                out["error"] = self.error
                out["httpErrorStatusCode"] = self.http_status
                out["httpErrorMessage"] = self.http_message
        return out


_seq = itertools.count(1)


def operation_name(now: float) -> str:
    return f"operation-{int(now * 1000)}-{secrets.token_hex(6)}-{secrets.token_hex(4)}-{next(_seq):08x}"


class GcpState:
    """Operations by name, request ids (project, id) -> operation name, firewalls by name."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.operations: dict[str, Operation] = {}
        self.request_ids: dict[str, str] = {}
        self.firewalls: dict[str, dict[str, Any]] = {}
        if path.exists():
            raw = json.loads(path.read_text())
            self.operations = {o["name"]: Operation(**o) for o in raw.get("operations", [])}
            self.request_ids = dict(raw.get("request_ids", {}))
            self.firewalls = dict(raw.get("firewalls", {}))

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(
            json.dumps(
                {
                    "operations": [asdict(o) for o in self.operations.values()],
                    "request_ids": self.request_ids,
                    "firewalls": self.firewalls,
                }
            )
        )
        tmp.replace(self.path)

    def add(self, op: Operation, request_id: str | None) -> Operation:
        expired = {n for n, o in self.operations.items() if op.inserted_at - o.inserted_at > RETENTION_S}
        if expired:
            self.operations = {n: o for n, o in self.operations.items() if n not in expired}
            self.request_ids = {r: n for r, n in self.request_ids.items() if n not in expired}
        self.operations[op.name] = op
        if request_id:
            self.request_ids[f"{op.project}/{request_id}"] = op.name
        self.save()
        return op

    def by_request(self, project: str, request_id: str | None) -> Operation | None:
        name = self.request_ids.get(f"{project}/{request_id}") if request_id else None
        return self.operations.get(name) if name else None


_STATES: weakref.WeakKeyDictionary[Engine, GcpState] = weakref.WeakKeyDictionary()


def state_of(engine: Engine) -> GcpState:
    """The engine's GCP state, loaded on first use (the router and the admin lister share it)."""
    found = _STATES.get(engine)
    if found is None:
        found = _STATES[engine] = GcpState(engine.root / "gcp.json")
    return found
