"""A worker's record of a row that a request deletes between the record's read and its write (a
fleet's probe answer, a policy's run, a pool's pass) is skipped, as it is for a row already gone
when read: `make fuzz` deleted a fleet mid-probe, and the probe's activity failed with
StaleDataError (Temporal retried it, and the retry found the row gone). On SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet
from sqlmodel import Session

from messages.fleet import HostProbe
from store import fleets, ids, policies, pools
from store.models import Pool
from store.secrets import SecretBox

NOW = datetime(2026, 12, 7, tzinfo=UTC)


def _fleet(s: Session) -> Callable[[Session], object]:
    fleets.save_fleet(s, SecretBox(Fernet.generate_key()), fleet_id="f1", project="default", name="rack",
                      user="ubuntu", port=22, hosts=["10.0.0.1"], bastion=None, new_host_id=ids.new_id,
                      private_key="k", probe_id="p1")
    [host] = fleets.hosts_of(s, "f1")
    probe = HostProbe(host_id=host.id, reachable=True, gpu_count=1)
    return lambda session: fleets.record_probe(session, probe, "p1")


def _policy(s: Session) -> Callable[[Session], object]:
    policies.save_policy(s, SecretBox(Fernet.generate_key()), policy_id="f1", project="default",
                         name="grow", enabled=True, spec={})
    return lambda session: policies.record_run(session, "f1", run_id="r1", acted=True, result="ok", at=NOW)


def _pool(s: Session) -> Callable[[Session], object]:
    pools.save_pool(s, Pool(id="f1", project="default", name="p", cloud="lambda", min_size=0, max_size=2,
                            size=1, workflow_id="pool-f1"))
    return lambda session: pools.record_reconcile(session, "f1", machines=[], errors=[], reconciled_at=NOW)


DELETE: dict[str, Callable[[Session], None]] = {
    "fleet probe": lambda s: fleets.delete_fleet(s, "f1"),
    "policy run": lambda s: policies.delete_policy(s, "f1"),
    "pool pass": lambda s: pools.forget(s, "f1"),
}
MAKE = {"fleet probe": _fleet, "policy run": _policy, "pool pass": _pool}


@pytest.mark.parametrize("what", list(MAKE))
def test_a_record_of_a_row_deleted_while_it_is_written_is_skipped(migrated: sa.Engine, what: str) -> None:
    engine = migrated
    with Session(engine) as s:
        record = MAKE[what](s)
    deleted = []

    def delete_meanwhile(*_: object) -> None:  # after the record's reads, before its write
        if not deleted:
            with Session(engine) as other:
                DELETE[what](other)
            deleted.append(True)

    with Session(engine) as s:
        sa.event.listen(s, "before_flush", delete_meanwhile)
        assert record(s) in (False, None)  # skipped (the functions that say so say False)
        assert deleted
        s.execute(sa.text("SELECT 1"))  # the session is usable after
