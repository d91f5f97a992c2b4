"""The simulated AWS's reading of a request and its error answers: one Query API call (`Call`:
action, numbered parameters, filters, tag specifications), glob matching of filter values, and
`Ec2Error` with EC2's capacity wording.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from urllib.parse import urlencode

from fakeclouds.errors import CloudError

# ----------------------------------------------------------------------------------- errors


class Ec2Error(CloudError):
    """An EC2 error answer: HTTP status, code, message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


def capacity_message(instance_type: str, zone: str, others: list[str]) -> str:
    where = f" or choosing {', '.join(others)}" if others else ""
    return (f"We currently do not have sufficient {instance_type} capacity in the Availability Zone you "
            f"requested ({zone}). Our system will be working on provisioning additional capacity. You can "
            f"currently get {instance_type} capacity by not specifying an Availability Zone in your "
            f"request{where}.")


# ----------------------------------------------------------------------------------- request parsing


@dataclass
class Call:
    """One Query API request, signature checked."""

    method: str
    headers: dict[str, str]
    params: dict[str, str]
    region: str
    service: str
    instance_type: str | None = None  # RunInstances: for the capacity message
    zone: str | None = None
    spot: bool = False

    @property
    def action(self) -> str:
        return self.params.get("Action", "")

    def numbered(self, prefix: str) -> list[str]:
        """`Prefix.1`, `Prefix.2`, ... in order."""
        found = []
        for k, v in self.params.items():
            rest = k[len(prefix) + 1:] if k.startswith(prefix + ".") else ""
            if rest.isdigit():
                found.append((int(rest), v))
        return [v for _, v in sorted(found)]

    def filters(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for k, v in self.params.items():
            m = re.fullmatch(r"Filter\.(\d+)\.Name", k)
            if m:
                out[v] = self.numbered(f"Filter.{m.group(1)}.Value")
        return out

    def tags(self, resource_type: str) -> dict[str, str]:
        tags: dict[str, str] = {}
        for k, v in self.params.items():
            m = re.fullmatch(r"TagSpecification\.(\d+)\.ResourceType", k)
            if m and v == resource_type:
                spec = f"TagSpecification.{m.group(1)}.Tag"
                for n in range(1, 51):
                    key = self.params.get(f"{spec}.{n}.Key")
                    if key is None:
                        break
                    tags[key] = self.params.get(f"{spec}.{n}.Value", "")
        return tags

    def body(self, **changes: str) -> bytes:
        return urlencode({**self.params, **changes}).encode()


def matches(value: str, patterns: list[str] | None) -> bool:
    return patterns is None or any(fnmatch.fnmatchcase(value, p) for p in patterns)


