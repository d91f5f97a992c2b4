"""The idempotency record and the row writes the API races with the workflow, on SQLite and
PostgreSQL: first use wins under a unique constraint, a racing duplicate reads the winner's row."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import sqlalchemy as sa
from cryptography.fernet import Fernet
from sqlmodel import Session

from store import connections, idempotency, instances
from store.models import Instance
from store.secrets import SecretBox


def claim(engine: sa.Engine, fingerprint: str, resource_id: str, key_hash: str = "h1") -> tuple[str, str]:
    with Session(engine, expire_on_commit=False) as s:
        rec = idempotency.claim_idempotency_key(s, scope="instances:default", key_hash=key_hash,
                                                fingerprint=fingerprint, resource_id=resource_id)
        return rec.fingerprint, rec.resource_id


def test_the_first_use_of_a_key_is_kept(migrated: sa.Engine) -> None:
    assert claim(migrated, "fp-a", "i1") == ("fp-a", "i1")
    assert claim(migrated, "fp-b", "i2") == ("fp-a", "i1")  # the caller sees the other fingerprint
    assert claim(migrated, "fp-b", "i2", key_hash="h2") == ("fp-b", "i2")
    with Session(migrated) as s:
        found = idempotency.find_idempotency_key(s, "instances:default", "h1")
        assert found is not None and found.resource_id == "i1" and found.created_at is not None
        assert idempotency.find_idempotency_key(s, "instances:vision", "h1") is None  # scoped


def test_racing_first_uses_agree_on_one_winner(migrated: sa.Engine) -> None:
    barrier = threading.Barrier(8)

    def racer(n: int) -> tuple[str, str]:
        barrier.wait()
        return claim(migrated, f"fp-{n}", f"i{n}")

    with ThreadPoolExecutor(8) as pool:
        seen = set(pool.map(racer, range(8)))
    assert len(seen) == 1  # every racer reads the one row that won


def test_insert_instance_if_absent_leaves_an_existing_row(migrated: sa.Engine) -> None:
    with Session(migrated) as s:
        assert instances.insert_instance_if_absent(s, Instance(id="a1", provider="local", connection_id="c",
                                                               workflow_id="allocation-a1", status="ready"))
    with Session(migrated) as s:
        assert not instances.insert_instance_if_absent(s, Instance(id="a1", provider="local",
                                                                   connection_id="c",
                                                                   workflow_id="allocation-a1"))
        row = s.get(Instance, "a1")
        assert row is not None and row.status == "ready"


def test_connected_lists_connected_connections_newest_first(migrated: sa.Engine) -> None:
    box = SecretBox(Fernet.generate_key())
    with Session(migrated, expire_on_commit=False) as s:
        a = connections.add_connection(s, box, provider="local", name="a", credentials={})
        b = connections.add_connection(s, box, provider="lambda", name="b", credentials={})
        c = connections.add_connection(s, box, provider="local", name="c", credentials={})
        connections.mark_connection(s, b.id, status="removing")
        assert [x.id for x in connections.connected(s)] == [c.id, a.id]
        assert [x.id for x in connections.connected(s, ["lambda"])] == []
        assert [x.id for x in connections.connected(s, ["local", "lambda"])] == [c.id, a.id]


def test_digests_are_keyed() -> None:
    key = Fernet.generate_key()
    one, same, other = SecretBox(key), SecretBox(key), SecretBox(Fernet.generate_key())
    assert one.digest(b"body") == same.digest(b"body") != other.digest(b"body")
    assert one.digest(b"body") != one.digest(b"body2") and len(one.digest(b"")) == 64
