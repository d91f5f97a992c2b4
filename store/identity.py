"""This installation's identity: its id (the ownership tag on every cloud resource) and its
SSH key pair (added to every machine so activities can log in; private half encrypted)."""

from __future__ import annotations

import uuid
from pathlib import Path

import asyncssh
import sqlalchemy as sa
from sqlmodel import Session

from settings import home_value
from store.models import SshIdentity
from store.secrets import SecretBox


def installation_id(home: Path, configured: str | None = None) -> str:
    """Short and tag-safe: [a-z0-9]{8}. Stable across restarts (kept under home)."""
    return configured or home_value(home, "installation-id", lambda: uuid.uuid4().hex[:8])


def ssh_identity(session: Session, box: SecretBox) -> tuple[str, str]:
    """(public_key, private_key) in OpenSSH format; created and stored on first use."""
    row = session.get(SshIdentity, "default")
    if row is None:
        key = asyncssh.generate_private_key("ssh-ed25519", comment="gpuprov")
        row = SshIdentity(
            public_key=key.export_public_key().decode().strip(),
            private_key=box.seal_text(key.export_private_key().decode()),
        )
        session.add(row)
        try:
            session.commit()
        except sa.exc.IntegrityError:  # another process won the race; use theirs
            session.rollback()
            row = session.get(SshIdentity, "default")
            assert row is not None
    return row.public_key, box.open_text(row.private_key)
