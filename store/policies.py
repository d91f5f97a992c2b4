"""Query helpers for policies and the daily budget (store/models.py Policy, ProjectBudget)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlmodel import Session

from store import spend
from store.db import commit_unless_gone
from store.models import Policy, ProjectBudget, utcnow
from store.secrets import SecretBox


def get_policy(session: Session, project: str, policy_id: str) -> Policy | None:
    """The project's policy of that id; None for an unknown id or another project's."""
    row = session.get(Policy, policy_id)
    return row if row is not None and row.project == project else None


KEEP = object()  # save_policy(webhook_query=KEEP): the saved query stays


def save_policy(session: Session, box: SecretBox, *, policy_id: str, project: str, name: str, enabled: bool,
                spec: dict[str, Any], webhook_query: str | None | object = None) -> Policy:
    """Insert or replace a policy's card (its trigger count and last result stay). `spec` holds a
    webhook's URL without its query; `webhook_query` is sealed apart (None: none; KEEP: the saved
    one). Commits."""
    row = session.get(Policy, policy_id)
    if row is None:
        row = Policy(id=policy_id, project=project, name=name, enabled=enabled, spec=spec)
    row.name, row.enabled, row.spec, row.updated_at = name, enabled, spec, utcnow()
    if webhook_query is not KEEP:
        row.webhook_secret = box.seal_text(webhook_query) if isinstance(webhook_query, str) else None
    session.add(row)
    session.commit()
    session.refresh(row)
    return row


def webhook_url(box: SecretBox, row: Policy, base: str) -> str:
    """The webhook's full URL: `base` (from the spec) and the sealed query. Never log it."""
    return base + ("?" + box.open_text(row.webhook_secret) if row.webhook_secret is not None else "")


def delete_policy(session: Session, policy_id: str) -> None:
    row = session.get(Policy, policy_id)
    if row is not None:
        session.delete(row)
        session.commit()


def record_run(session: Session, policy_id: str, *, run_id: str, acted: bool, result: str,
               at: datetime) -> bool:
    """Record a run's outcome: its result, and when it acted, one more trigger. A second record of
    the same run (a retried activity) changes nothing; a policy deleted meanwhile is skipped. Commits."""
    row = session.get(Policy, policy_id)
    if row is None or row.last_run_id == run_id:
        return False
    row.last_run_id, row.last_result, row.last_evaluated_at = run_id, result, at
    if acted:
        row.trigger_count += 1
        row.last_triggered_at = at
    session.add(row)
    return commit_unless_gone(session)


def get_budget(session: Session, project: str) -> ProjectBudget | None:
    return session.get(ProjectBudget, project)


def set_budget(session: Session, project: str, daily_usd: float | None) -> ProjectBudget | None:
    """Set (or, with None, clear) the project's daily budget. Commits."""
    row = session.get(ProjectBudget, project)
    if daily_usd is None:
        if row is not None:
            session.delete(row)
            session.commit()
        return None
    if row is None:
        row = ProjectBudget(project=project, daily_usd=daily_usd)
    row.daily_usd, row.updated_at = daily_usd, utcnow()
    session.add(row)
    session.commit()
    session.refresh(row)
    return row


def budget_refusal(session: Session, project: str, now: datetime) -> str | None:
    """Why the project may start no new machine now (its daily budget is reached), or None. The one
    check every way of allocating asks: POST /instances today, the job queue after it."""
    row = get_budget(session, project)
    if row is None:
        return None
    spent = spend.spent_today(session, project, now)
    if spent < row.daily_usd:
        return None
    return (f"daily budget of ${row.daily_usd:.2f} for project {project!r} is reached (spent ${spent:.2f} "
            "today, UTC): no new allocations until tomorrow, or raise it with PUT /api/compute/budget")
