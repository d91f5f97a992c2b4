"""The name every gpuprov resource carries on clouds that find things by name: `gpuprov-<installation>-
<key>`. It is both the ownership mark (the prefix) and the idempotency key (a create looks it up before
launching), so it must be the same for the same key on every worker, forever."""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

from providers.base import InstanceRef, InstanceStatus, InvalidRequest
from providers.rest import parsing

HASH_CHARS = 8


def prefix(installation_id: str) -> str:
    return f"gpuprov-{installation_id}-"


def owned_name(installation_id: str, key: str, max_length: int, *, what: str) -> str:
    """`gpuprov-<installation>-<key>`, at most `max_length` chars. A key too long for that is shortened
    deterministically (head + "-" + 8 hex chars of its SHA-256), so the same key always yields the
    same name. `what` names the cloud's object for the refusal ("a Lambda Cloud instance name")."""
    head = prefix(installation_id)
    if len(head) + len(key) <= max_length:
        return head + key
    room = max_length - len(head) - 1 - HASH_CHARS
    if room < 1:
        raise InvalidRequest(f"installation id {installation_id!r} is too long for {what}")
    return f"{head}{key[:room]}-{hashlib.sha256(key.encode()).hexdigest()[:HASH_CHARS]}"


class FoundByName:
    """`list_owned`, `list_machines`, `find` and `find_all` for clouds whose machines carry the owned
    name and offer nothing better to look them up by: the account's machines are listed and matched by
    name. Names are not known to be unique there, so `find_all` returns every match (two creates that
    raced past the lookup made two). Mixed in before the adapter's base class; the adapter supplies
    `_machines` (its machines that are not gone), `_ref`, `_name` and `_status` (one listed item's
    status, the helper its `get` uses too)."""

    id: ClassVar[str]
    installation_id: str

    async def _machines(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def _ref(self, item: dict[str, Any], key: str | None = None) -> InstanceRef:
        raise NotImplementedError

    def _name(self, key: str) -> str:
        raise NotImplementedError

    def _status(self, ref: InstanceRef, item: dict[str, Any]) -> InstanceStatus:
        raise NotImplementedError

    @property
    def _prefix(self) -> str:
        return prefix(self.installation_id)

    async def _by_name(self, name: str) -> list[dict[str, Any]]:
        return [m for m in await self._machines() if m.get("name") == name]

    def _owned(self, machines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [m for m in machines if str(m.get("name") or "").startswith(self._prefix)]

    async def list_owned(self) -> list[InstanceRef]:
        machines = await self._machines()
        with parsing(self.id, "machine listing"):
            return [self._ref(m) for m in self._owned(machines)]

    async def list_machines(self) -> list[InstanceStatus]:
        """Our machines as the listing `_machines` reads (its pages, nothing more) reports them,
        each through `_status`, the helper `get` uses on the single answer."""
        machines = await self._machines()
        with parsing(self.id, "machine listing"):
            return [self._status(self._ref(m), m) for m in self._owned(machines)]

    async def find(self, key: str) -> InstanceRef | None:
        found = await self.find_all(key)
        return found[0] if found else None

    async def find_all(self, key: str) -> list[InstanceRef]:
        # By the full name, so keys shortened to fit the cloud's limit are found too.
        found = await self._by_name(self._name(key))
        with parsing(self.id, "machine listing"):
            return [self._ref(m, key=key) for m in found]
