"""The simulated Compute Engine's own state beside the engine's machines: operations, the request
ids they answered, and firewall rules. Kept per engine, written to `<engine root>/gcp.json` on every
change (the engine's state dir when it persists, else its scratch dir), read back on start.
"""

from __future__ import annotations

import ipaddress
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


Piece = tuple[int, int, ipaddress.IPv4Network | ipaddress.IPv6Network]  # first port, last port, sources
ANYWHERE = "0.0.0.0/0"


def _tcp_ports(entries: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """The TCP port ranges of a rule's `allowed` / `denied` entries ("all", or tcp without ports: all)."""
    out: list[tuple[int, int]] = []
    for entry in entries:
        proto = str(entry.get("IPProtocol", "")).lower()
        if proto not in ("tcp", "6", "all"):
            continue
        ports = [str(p) for p in entry.get("ports") or []] if proto != "all" else []
        if not ports:
            out.append((1, 65535))
        for port in ports:
            lo, _, hi = port.partition("-")
            out.append((max(int(lo), 1), int(hi or lo)))
    return out


def _minus(pieces: list[Piece], deny: Piece) -> list[Piece]:
    """`pieces` less what `deny` covers (two CIDRs that overlap are nested)."""
    dlo, dhi, dnet = deny
    out: list[Piece] = []
    for lo, hi, net in pieces:
        if dhi < lo or dlo > hi or net.version != dnet.version or not net.overlaps(dnet):
            out.append((lo, hi, net))
            continue
        if lo < dlo:
            out.append((lo, dlo - 1, net))
        if hi > dhi:
            out.append((dhi + 1, hi, net))
        if not net.subnet_of(dnet):  # type: ignore[arg-type]
            out += [(max(lo, dlo), min(hi, dhi), rest) for rest in net.address_exclude(dnet)]  # type: ignore[arg-type]
    return out


def ingress(firewalls: list[dict[str, Any]], tags: list[str]) -> list[tuple[int, int, str]]:
    """What the VPC firewall lets in to an instance with network `tags` on the default network (the only
    one simulated), as (first port, last port, source CIDR) TCP rules: the enabled INGRESS rules that
    target all instances or one of its tags; an allow rule counts less what a deny rule of higher or
    equal priority (lower or equal number) covers; past them, the implied deny-all. An ingress rule
    stored without sourceRanges (Compute Engine fills 0.0.0.0/0 when no source is given) is from
    anywhere. Source tags and service accounts (not simulated) name no outside peer. The default
    network's pre-populated rules (default-allow-ssh, ...) are not simulated: only rules made here."""
    applies = [
        fw
        for fw in firewalls
        if fw.get("direction", "INGRESS") == "INGRESS"
        and not fw.get("disabled")
        and (not fw.get("targetTags") or set(fw["targetTags"]) & set(tags))
    ]

    def pieces(fw: dict[str, Any], key: str) -> list[Piece]:
        sources = fw.get("sourceRanges") or ([] if fw.get("sourceTags") else [ANYWHERE])
        nets = [ipaddress.ip_network(c, strict=False) for c in sources]
        return [(lo, hi, net) for lo, hi in _tcp_ports(fw.get(key) or []) for net in nets]

    out: list[tuple[int, int, str]] = []
    for fw in applies:
        allowed = pieces(fw, "allowed")
        for other in applies:
            if int(other.get("priority", 1000)) <= int(fw.get("priority", 1000)):
                for deny in pieces(other, "denied"):
                    allowed = _minus(allowed, deny)
        out += [(lo, hi, str(net)) for lo, hi, net in allowed]
    return list(dict.fromkeys(out))


_STATES: weakref.WeakKeyDictionary[Engine, GcpState] = weakref.WeakKeyDictionary()


def state_of(engine: Engine) -> GcpState:
    """The engine's GCP state, loaded on first use (the router and the admin lister share it)."""
    found = _STATES.get(engine)
    if found is None:
        found = _STATES[engine] = GcpState(engine.root / "gcp.json")
    return found
