"""A FAKE resolver for fleet addresses (providers/fleet_addresses.py): names answered from a table,
never from the network (this box's DNS server is not on loopback: no test may ask it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class FakeResolver:
    """`table[name]` (case-insensitive); a name not in it gets `default` (None: it does not resolve).
    Every name asked is in `asked`."""

    table: dict[str, list[str]] = field(default_factory=dict)
    default: list[str] | None = field(default_factory=lambda: ["192.0.2.10"])  # TEST-NET-1
    asked: list[str] = field(default_factory=list)

    def __call__(self, name: str) -> Sequence[str]:
        self.asked.append(name)
        found = self.table.get(name.lower().rstrip("."), self.default)
        if not found:
            raise LookupError(name)
        return list(found)
