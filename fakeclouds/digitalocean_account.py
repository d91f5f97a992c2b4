"""The simulated DigitalOcean account beside its droplets — tags, cloud firewalls, SSH keys — and what
its firewalls let in (`Facade.ingress` of fakeclouds/digitalocean_api.py): the union of the inbound
TCP rules of every firewall that names a droplet by id or by one of its tags; a droplet no firewall
covers is open to everything, as on DigitalOcean. SSH itself is not filtered."""

from __future__ import annotations

from typing import Any

from fakeclouds.engine import TERMINATING, Engine, Machine
from fakeclouds.facade import IngressRule

NAME = "digitalocean"


def state(engine: Engine) -> dict[str, Any]:
    """This account's tags, firewalls and SSH keys (persisted with the engine, cleared by reset)."""
    state = engine.facade_state[NAME]
    for part in ("tags", "firewalls", "keys"):
        state.setdefault(part, {})
    return state


def droplets(engine: Engine) -> list[Machine]:
    # A deleted droplet is gone from the API at once, while the engine still winds it down.
    return [m for m in engine.live(NAME) if m.status != TERMINATING]


def side_resources(engine: Engine) -> list[dict[str, Any]]:
    account = state(engine)
    return ([{"kind": "firewall", "id": f["id"], "name": f["name"]} for f in account["firewalls"].values()]
            + [{"kind": "tag", "id": t, "name": t} for t in account["tags"]]
            + [{"kind": "ssh-key", "id": str(k["id"]), "name": k["name"]} for k in account["keys"].values()])


def tags_of(engine: Engine, m: Machine) -> list[str]:
    """The droplet's tags that still exist (deleting a tag untags everything)."""
    return [tag for tag in m.extra.get("tags", []) if tag in state(engine)["tags"]]


def _sources(engine: Engine, target: dict[str, Any]) -> list[str]:
    """A rule's sources as CIDRs: its addresses (a bare address is one host), and the public
    addresses of the droplets it names by id or tag."""
    cidrs = [a if "/" in a else f"{a}/{128 if ':' in a else 32}" for a in target.get("addresses") or []]
    ids = {str(d) for d in target.get("droplet_ids") or []}
    tags = set(target.get("tags") or [])
    for m in droplets(engine):
        if m.address and (m.id in ids or tags & set(tags_of(engine, m))):
            cidrs.append(f"{m.address}/32")
    return cidrs


def _port_range(ports: str | None) -> tuple[int, int]:
    """A rule's `ports` ("22", "8000-9000", "0" or "all": every port) as (first, last)."""
    if ports in (None, "", "0", "all"):
        return 1, 65535
    first, _, last = str(ports).partition("-")
    return int(first), int(last or first)


def ingress(engine: Engine, m: Machine) -> list[IngressRule]:
    """What DigitalOcean lets in to droplet `m`: the union of the inbound TCP rules of the firewalls
    that cover it (by droplet id, or by a tag it carries); with no firewall on it, everything."""
    tags = set(tags_of(engine, m))
    covering = [fw for fw in state(engine)["firewalls"].values()
                if m.id in {str(d) for d in fw.get("droplet_ids") or []} or tags & set(fw.get("tags") or [])]
    if not covering:
        return [(1, 65535, "0.0.0.0/0"), (1, 65535, "::/0")]
    rules: list[IngressRule] = []
    for fw in covering:
        for rule in fw.get("inbound_rules") or []:
            if rule.get("protocol") != "tcp":
                continue
            first, last = _port_range(rule.get("ports"))
            for cidr in _sources(engine, rule.get("sources") or {}):
                if (first, last, cidr) not in rules:
                    rules.append((first, last, cidr))
    return rules
