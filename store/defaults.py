"""A project's default cloud and region (store/models.py ProjectDefaults): what a request that names
no cloud plans on (api/routers/defaults.py); and its default machine lease (activities/lease.py)."""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from store.models import ProjectDefaults, utcnow


def get_defaults(session: Session, project: str) -> ProjectDefaults | None:
    return session.get(ProjectDefaults, project)


def save_defaults(session: Session, project: str, cloud: str, region: str | None,
                  lease_hours: float | None = None) -> ProjectDefaults:
    """Set `project`'s defaults (replacing any earlier ones) and commit."""
    row = session.get(ProjectDefaults, project) or ProjectDefaults(project=project, cloud=cloud)
    row.cloud, row.region, row.lease_hours, row.updated_at = cloud, region, lease_hours, utcnow()
    session.add(row)
    try:
        session.commit()
    except IntegrityError:  # a concurrent first save inserted it: this one replaces it
        session.rollback()
        return save_defaults(session, project, cloud, region, lease_hours)
    session.refresh(row)
    return row


def clear_defaults(session: Session, project: str) -> bool:
    """Forget `project`'s defaults and commit; False when there were none."""
    row = session.get(ProjectDefaults, project)
    if row is None:
        return False
    session.delete(row)
    session.commit()
    return True
