"""Rotating the secret key: stored secrets open with the ring, and `reseal_all` moves them to the
current key so the previous one can leave it."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet
from sqlmodel import Session

from store import connections
from store.identity import ssh_identity
from store.rekey import reseal_all
from store.secrets import SecretBox, SecretError


def test_reseal_moves_every_stored_secret_to_the_current_key(migrated: sa.Engine) -> None:
    old, new = Fernet.generate_key(), Fernet.generate_key()
    with Session(migrated, expire_on_commit=False) as s:
        conn = connections.add_connection(s, SecretBox(old), provider="lambda", name="lam",
                                          credentials={"api_key": "k-4242"}, endpoint="http://x")
        public, private = ssh_identity(s, SecretBox(old))

    assert reseal_all(migrated, SecretBox.from_ring([new, old])) == 2
    only_new = SecretBox(new)
    with Session(migrated) as s:
        stored = s.get(type(conn), conn.id)
        assert stored is not None and connections.credentials_of(only_new, stored) == {"api_key": "k-4242"}
        assert ssh_identity(s, only_new) == (public, private)
        with pytest.raises(SecretError):
            connections.credentials_of(SecretBox(old), stored)
