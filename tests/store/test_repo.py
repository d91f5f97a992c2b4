from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet
from sqlmodel import Session

from store import connections, instances, migrate
from store import ids as id_store
from store.identity import ssh_identity
from store.models import Attempt, Instance
from store.secrets import SecretBox, SecretError

PLAINTEXT = "sk-live-very-secret-4242"


@pytest.fixture
def session(migrated: sa.Engine):  # type: ignore[no-untyped-def]
    with Session(migrated, expire_on_commit=False) as s:
        yield s


@pytest.fixture
def box() -> SecretBox:
    return SecretBox(Fernet.generate_key())


def test_credentials_are_stored_encrypted_and_round_trip(session: Session, box: SecretBox) -> None:
    conn = connections.add_connection(session, box, provider="lambda", name="lam",
                                      credentials={"api_key": PLAINTEXT}, endpoint="http://x")
    query = sa.text("SELECT secret FROM connection WHERE id = :id")
    raw = bytes(session.execute(query, {"id": conn.id}).scalar_one())
    assert PLAINTEXT.encode() not in raw and b"api_key" not in raw
    fresh = connections.get_connection(session, conn.id)
    assert fresh is not None and connections.credentials_of(box, fresh) == {"api_key": PLAINTEXT}


def test_wrong_key_raises_secret_error(session: Session, box: SecretBox) -> None:
    conn = connections.add_connection(session, box, provider="lambda", name="lam",
                                      credentials={"api_key": PLAINTEXT})
    with pytest.raises(SecretError):
        connections.credentials_of(SecretBox(Fernet.generate_key()), conn)


def test_ssh_private_key_is_stored_encrypted(session: Session, box: SecretBox) -> None:
    public, private = ssh_identity(session, box)
    assert public.startswith("ssh-ed25519 ") and "PRIVATE KEY" in private
    raw = bytes(session.execute(sa.text("SELECT private_key FROM sshidentity")).scalar_one())
    assert b"PRIVATE KEY" not in raw
    assert ssh_identity(session, box) == (public, private)  # stable on second use


def test_connection_for_skips_connections_being_removed(session: Session, box: SecretBox) -> None:
    conn = connections.add_connection(session, box, provider="local", name="a", credentials={"api_key": "k"},
                                      account="acct")
    found = connections.connection_for(session, "local")
    assert found is not None and found.id == conn.id and found.account == "acct"
    connections.mark_connection(session, conn.id, status="removing", account="acct")
    assert connections.connection_for(session, "local") is None
    assert connections.connection_for(session, "lambda") is None
    assert connections.delete_connection(session, conn.id)
    assert not connections.delete_connection(session, conn.id)


def test_save_connection_is_idempotent(session: Session, box: SecretBox) -> None:
    args: dict[str, Any] = dict(connection_id="cx1", provider="local", name="n",
                                secret=box.seal({"api_key": "k"}), endpoint=None, ca_bundle="PEM",
                                account="a")
    first = connections.save_connection(session, **args)
    again = connections.save_connection(session, **{**args, "name": "other"})
    assert again.id == first.id and again.name == "n" and again.ca_bundle == "PEM"


def _instance(iid: str, status: str = "provisioning", connection_id: str = "c1") -> Instance:
    return Instance(id=iid, provider="local", connection_id=connection_id, workflow_id=f"allocate-{iid}",
                    status=status)


def test_instances_update_and_live_filter(session: Session) -> None:
    for iid, status in [("a1", "provisioning"), ("a2", "ready"), ("a3", "terminated"), ("a4", "failed")]:
        session.add(_instance(iid, status))
    session.add(_instance("b1", "ready", connection_id="c2"))
    session.commit()
    assert sorted(i.id for i in instances.live_instances(session, "c1")) == ["a1", "a2"]
    row = instances.update_instance(session, "a1", status="ready", phase="ready", ssh_host="127.0.0.1",
                                    gpus_found=[{"index": 0, "name": "H100"}])
    assert row is not None and row.status == "ready"
    again = instances.get_instance(session, "a1")
    assert again is not None and again.gpus_found == [{"index": 0, "name": "H100"}]
    assert instances.update_instance(session, "nope", status="ready") is None
    with pytest.raises(AttributeError):
        instances.update_instance(session, "a1", colour="red")


@pytest.mark.parametrize("ended", ["terminated", "failed", "lost"])
def test_an_ended_allocations_row_takes_no_phase_mark(session: Session, ended: str) -> None:
    """A step marked by an activity still running after the workflow recorded the end (a cancel
    that did not wait for it: SET_UP_MACHINE marking gpu_check once the machine was terminated, as
    a fresh-clone run showed) must not show the machine provisioning again."""
    session.add(_instance("a1", "provisioning"))
    session.commit()
    instances.mark_phases(session, "a1", [("provisioning", "ssh"), ("terminating", "terminating"),
                                          (ended, ended)])
    instances.mark_phases(session, "a1", [("provisioning", "k3s"), ("provisioning", "gpu_check")])
    row = instances.get_instance(session, "a1")
    assert row is not None and (row.status, row.phase) == (ended, ended)
    assert [e.phase for e in instances.events_of(session, "a1")][-3:] == ["ssh", "terminating", ended]


def test_a_mark_after_a_step_applies_only_while_the_row_is_at_that_step(session: Session) -> None:
    """SET_UP_MACHINE's next step is marked only over its previous one: a teardown its workflow
    recorded meanwhile (the activity's cancel not yet seen) stays shown."""
    session.add(_instance("a1", "provisioning"))
    session.commit()
    instances.mark_phases(session, "a1", [("provisioning", "ssh")])
    instances.mark_phases(session, "a1", [("provisioning", "k3s")], after=("provisioning", "ssh"))
    instances.mark_phases(session, "a1", [("terminating", "compensating")])  # the workflow's teardown
    instances.mark_phases(session, "a1", [("provisioning", "gpu_check")], after=("provisioning", "k3s"))
    row = instances.get_instance(session, "a1")
    assert row is not None and (row.status, row.phase) == ("terminating", "compensating")
    assert [e.phase for e in instances.events_of(session, "a1")][-3:] == ["ssh", "k3s", "compensating"]


def test_a_session_holding_the_row_reads_what_its_marks_wrote(session: Session) -> None:
    """mark_phases writes with statements, past the session's objects: an Instance the session
    already holds must read the marked state after it, committed or not (record_allocation marks,
    then reads the row, in one transaction) — not the state it was loaded with."""
    session.add(_instance("a1", "provisioning"))
    session.commit()
    held = instances.get_instance(session, "a1")
    assert held is not None and held.status == "provisioning"
    instances.mark_phases(session, "a1", [("provisioning", "ssh")], commit=False)
    assert (held.status, held.phase) == ("provisioning", "ssh")
    instances.mark_phases(session, "a1", [("ready", "ready")])
    again = instances.get_instance(session, "a1")
    assert again is held and (held.status, held.phase) == ("ready", "ready")
    assert [e.phase for e in instances.events_of(session, "a1")] == ["ssh", "ready"]


def test_record_attempt_is_idempotent_per_seq(session: Session) -> None:
    session.add(_instance("a1"))
    session.commit()

    def attempt(outcome: str) -> Attempt:
        return Attempt(instance_id="a1", seq=1, provider="local", instance_type="t", region="r",
                       price_per_hour=1.5, outcome=outcome)

    instances.record_attempt(session, attempt("created"))
    [held] = instances.attempts_of(session, "a1")  # the session now holds the row as an object
    began = held.at
    instances.record_attempt(session, attempt("capacity"))
    rows = instances.attempts_of(session, "a1")
    assert [(a.seq, a.outcome) for a in rows] == [(1, "capacity")]
    assert held.outcome == "capacity" and held.at == began  # re-read, and the attempt keeps its start


def test_new_id_shape() -> None:
    ids = {id_store.new_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(re.fullmatch(r"[a-z][a-z0-9]{9}", i) for i in ids)


def test_one_installation_id_per_database_whoever_asks_first(engine: sa.Engine, tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from store.identity import IdentityError, installation_id
    migrate.upgrade(engine)
    (tmp_path / "installation-id").write_text("legacy01\n")  # a pre-database home file
    with ThreadPoolExecutor(8) as pool:
        ids = set(pool.map(lambda _: installation_id(engine, legacy_home=tmp_path), range(16)))
    assert ids == {"legacy01"}  # adopted, so machines an older gpuprov made stay ours
    assert installation_id(engine) == "legacy01"  # a process with another (or no) home agrees
    assert installation_id(engine, "legacy01") == "legacy01"
    with pytest.raises(IdentityError, match="database says legacy01"):
        installation_id(engine, "other001")
    with pytest.raises(IdentityError, match="a-z0-9"):
        installation_id(engine, "Bad_Id")
