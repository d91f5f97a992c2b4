"""After a key rotation: every secret stored in the database sealed again with the current key, so
the previous key can later leave the ring (Temporal histories are another matter: they keep the
key they were written with until they age out)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlmodel import Session, select

from store.models import Connection, Fleet, Policy, SshIdentity
from store.secrets import SecretBox


def reseal_all(engine: sa.Engine, box: SecretBox) -> int:
    """Re-encrypt connection credentials and the SSH identity with `box`'s current key, in one
    transaction; returns how many were resealed. A secret no key of the ring opens raises SecretError
    (nothing is changed then)."""
    count = 0
    with Session(engine) as session:
        for conn in session.exec(select(Connection)).all():
            conn.secret = box.reseal(conn.secret)
            session.add(conn)
            count += 1
        for fleet in session.exec(select(Fleet)).all():  # SSH fleets' keys (and their bastions')
            fleet.secret = box.reseal(fleet.secret)
            if fleet.bastion_secret is not None:
                fleet.bastion_secret = box.reseal(fleet.bastion_secret)
            session.add(fleet)
            count += 1
        for policy in session.exec(select(Policy)).all():  # webhook queries
            if policy.webhook_secret is not None:
                policy.webhook_secret = box.reseal(policy.webhook_secret)
                session.add(policy)
                count += 1
        for ident in session.exec(select(SshIdentity)).all():
            ident.private_key = box.reseal(ident.private_key)
            session.add(ident)
            count += 1
        session.commit()
    return count
