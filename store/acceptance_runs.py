"""Acceptance runs (store/models.py AcceptanceRun): written by the run's workflow as it goes, read by
the API and the CLI, and exported as the committed results file's entries (providers/support.py).
One run at a time per cloud account (AcceptanceLane, keyed by `lane_key`): the API takes the lane before
it makes a run's row and starts it, and the run's last record — its result — lets it go."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

import sqlalchemy as sa
from sqlmodel import Session, col, select

from messages.acceptance import AcceptanceResult, AcceptanceState, RecordAcceptanceInput
from store.clock import aware
from store.models import AcceptanceLane, AcceptanceRun, Connection, utcnow

_TAKE = sa.text("INSERT INTO acceptance_lane (account_key, run_id, taken_at) "
                "VALUES (:key, :run_id, :now) ON CONFLICT (account_key) DO NOTHING")
_TAKE_OVER = sa.text("UPDATE acceptance_lane SET run_id = :run_id, taken_at = :now "
                     "WHERE account_key = :key AND run_id = :holder")
_LET_GO = sa.text("DELETE FROM acceptance_lane WHERE run_id = :run_id")  # a run holds one lane at most


def save(session: Session, inp: RecordAcceptanceInput) -> None:
    """The run's row, made at its start and brought up to date at each record (idempotent: a retried
    record writes the same)."""
    row = session.get(AcceptanceRun, inp.run_id) or AcceptanceRun(
        id=inp.run_id, project=inp.project, connection_id=inp.connection_id, cloud=inp.state.cloud,
        state=inp.state.model_dump_json())
    row.state = inp.state.model_dump_json()
    if inp.result is not None:
        row.result = inp.result.model_dump_json()
        row.finished_at = row.finished_at or utcnow()
        session.execute(_LET_GO, {"run_id": row.id})
    session.add(row)
    session.commit()


def forget(session: Session, run_id: str) -> None:
    """Remove a run's row, if made, and let its lane go (its workflow never started)."""
    session.execute(_LET_GO, {"run_id": run_id})
    row = session.get(AcceptanceRun, run_id)
    if row is not None:
        session.delete(row)
    session.commit()


def has_ended(session: Session, run_id: str) -> bool:
    """Whether the run recorded its end (its result)."""
    row = session.get(AcceptanceRun, run_id)
    return row is not None and row.result is not None


def lane_key(connection: Connection) -> str:
    """The cloud account a connection's runs are held to: the identity its credentials verified as
    (`Connection.account`), so one key connected twice — in one project or in two — is one account.
    Two different credentials on one account are two wherever that identity names the key or the
    user (AWS's names the IAM user, Lambda's the key). A connection without a verified identity is
    its own. A digest: the table holds no account name."""
    account, provider = connection.account, connection.provider
    who = f"{provider}\0{account}" if account else f"connection\0{connection.id}"
    return hashlib.sha256(who.encode()).hexdigest()[:32]


class Lane(NamedTuple):
    """Who holds an account's lane, since when."""

    run_id: str
    taken_at: datetime


def take_lane(session: Session, key: str, run_id: str, *, holder: str | None = None) -> Lane | None:
    """Take the lane `key` (`lane_key`) for `run_id`: None when taken, else who holds it. `holder`:
    take it from that run (one that is not under way), unless another took it since."""
    for _ in range(3):  # the lane let go between the insert and the read: try again
        args = {"key": key, "run_id": run_id, "holder": holder, "now": utcnow()}
        taken = session.connection().execute(_TAKE if holder is None else _TAKE_OVER, args).rowcount
        session.commit()
        if taken == 1:
            return None
        lane = session.get(AcceptanceLane, key)
        if lane is not None:
            return Lane(lane.run_id, aware(lane.taken_at))
        holder = None
    raise RuntimeError(f"the acceptance lane {key} was taken and let go three times over")


def get(session: Session, project: str, run_id: str) -> AcceptanceRun | None:
    row = session.get(AcceptanceRun, run_id)
    return row if row is not None and row.project == project else None


def state_of(row: AcceptanceRun) -> AcceptanceState:
    return AcceptanceState.model_validate_json(row.state)


def result_of(row: AcceptanceRun) -> AcceptanceResult | None:
    return AcceptanceResult.model_validate_json(row.result) if row.result else None


def results(session: Session, *, project: str | None = None,
            clouds: Sequence[str] | None = None) -> list[AcceptanceResult]:
    """Every ended run's result (of `project` and `clouds`, or all), oldest first: with the committed
    file's, what each cloud's support status is derived from on this deployment."""
    stmt = select(AcceptanceRun).where(col(AcceptanceRun.result).is_not(None))
    if project is not None:
        stmt = stmt.where(AcceptanceRun.project == project)
    if clouds is not None:
        stmt = stmt.where(col(AcceptanceRun.cloud).in_(list(clouds)))
    rows = session.exec(stmt.order_by(col(AcceptanceRun.created_at), col(AcceptanceRun.id))).all()
    return [r for r in (result_of(row) for row in rows) if r is not None]
