"""This installation's identity: its id (the ownership tag on every cloud resource) and its
SSH key pair (added to every machine so activities can log in; private half encrypted).

Both live in the database, so every process of a deployment — N workers, N API replicas —
shares them: a create retried on another worker looks for the same name and tag.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import asyncssh
import sqlalchemy as sa
from sqlmodel import Session

from store.models import Installation, SshIdentity
from store.secrets import SecretBox

M = TypeVar("M", Installation, SshIdentity)

_ID_RE = re.compile(r"^[a-z0-9]{4,16}$")
LEGACY_FILE = "installation-id"  # where gpuprov kept it before it moved into the database


class IdentityError(Exception):
    """The configured installation id contradicts the database's (or is not tag-safe)."""


def installation_id(engine: sa.Engine, configured: str | None = None, legacy_home: Path | None = None) -> str:
    """The deployment's id, [a-z0-9]{4,16}. Created once, race-safe, in the database.

    The first process to ask seeds it from `configured` (GPUPROV_INSTALLATION_ID), else from a
    pre-database home file (`legacy_home/installation-id`, so machines an older gpuprov made stay
    ours), else a fresh random id. A process configured with another id than the database holds
    refuses to start: two ids in one deployment would make duplicates and leaks."""
    if configured is not None and not _ID_RE.match(configured):
        raise IdentityError(f"GPUPROV_INSTALLATION_ID must be 4-16 characters of [a-z0-9], "
                            f"got {configured!r}")
    with Session(engine) as session:
        row = _once(session, Installation, lambda: Installation(
            installation_id=configured or _legacy(legacy_home) or uuid.uuid4().hex[:8]))
    if configured is not None and configured != row.installation_id:
        raise IdentityError(
            f"GPUPROV_INSTALLATION_ID={configured} but this deployment's database says "
            f"{row.installation_id}; unset it (the database is the source of truth)")
    return row.installation_id


def _legacy(home: Path | None) -> str | None:
    if home is None:
        return None
    path = home / LEGACY_FILE
    try:
        value = path.read_text().strip()
    except OSError:
        return None
    return value if _ID_RE.match(value) else None


def ssh_identity(session: Session, box: SecretBox) -> tuple[str, str]:
    """(public_key, private_key) in OpenSSH format; created and stored on first use."""
    def make() -> SshIdentity:
        key = asyncssh.generate_private_key("ssh-ed25519", comment="gpuprov")
        return SshIdentity(public_key=key.export_public_key().decode().strip(),
                           private_key=box.seal_text(key.export_private_key().decode()))

    row = _once(session, SshIdentity, make)
    return row.public_key, box.open_text(row.private_key)


def _once(session: Session, model: type[M], make: Callable[[], M]) -> M:
    """The model's one row (id "default"), inserted from `make()` by whichever process gets there
    first: a loser of the race reads the winner's row."""
    row = session.get(model, "default")
    if row is None:
        session.add(make())
        try:
            session.commit()
        except sa.exc.IntegrityError:
            session.rollback()
        row = session.get(model, "default")
        assert row is not None
    return row
