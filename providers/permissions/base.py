"""What a cloud's permission entry holds, and the helpers its module (providers/permissions/<cloud>.py)
writes it with. See providers/permissions/__init__.py."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

DOC = "docs/permissions.md"  # generated whole: `python -m providers.permissions > docs/permissions.md`
README_HEADING = "## Permissions each cloud needs"
UNCONFIRMED = "[unconfirmed]"
UNSCOPED = "an account-wide key: none narrower exists"
SHORT = 400  # a document up to this long is shown whole on the connect page
@dataclass(frozen=True)
class CloudPermissions:
    """What one cloud's credentials must be allowed, and why each grant is there."""

    kind: str  # what the document is: an IAM policy, a custom role, token scopes, ... or "none"
    summary: str  # one line: the connect page and the README's list
    # The set, in the vendor's own names; empty where the vendor offers nothing narrower than the account.
    permissions: tuple[str, ...]
    # Every recorded call -> the permissions it needs (a subset of `permissions`); () needs none
    # (then `free` says why). Unscoped clouds list their calls too, so a new call is looked at.
    calls: Mapping[str, tuple[str, ...]]
    document: str  # what to paste: the policy JSON, the role's permissions, the scopes
    sources: tuple[str, ...]
    free: Mapping[str, str] = field(default_factory=dict)  # call -> why it needs no permission
    extra: Mapping[str, str] = field(default_factory=dict)  # permission no call uses -> why it is in the set
    notes: tuple[str, ...] = ()
    cloud: str = ""  # its id: the module's name, filled in when loaded (providers/permissions/__init__.py)

    @property
    def scoped(self) -> bool:
        return bool(self.permissions)


def each(perms: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p for ps in perms.values() for p in ps))


def same(calls: tuple[str, ...], *perms: str) -> dict[str, tuple[str, ...]]:
    return {c: perms for c in calls}


def unscoped(calls: tuple[str, ...], summary: str, sources: tuple[str, ...],
              notes: tuple[str, ...] = ()) -> CloudPermissions:
    return CloudPermissions(kind="account-wide API key", summary=summary, permissions=(),
                            calls={c: () for c in calls}, document=summary, sources=sources,
                            free={c: UNSCOPED for c in calls}, notes=notes)


def no_account(summary: str, sources: tuple[str, ...], calls: tuple[str, ...] = (),
           why: str = "") -> CloudPermissions:
    return CloudPermissions(kind="none", summary=summary, permissions=(),
                            calls={c: () for c in calls}, document=summary, sources=sources,
                            free={c: why for c in calls})
