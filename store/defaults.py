"""A project's default cloud and region (store/models.py ProjectDefaults): what a request that names
no cloud plans on (api/routers/defaults.py); and its default machine lease (activities/lease.py)."""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from store.models import ProjectDefaults, utcnow

# A machine's lease when neither the request nor the project says (activities/lease.py).
DEFAULT_LEASE_HOURS = 12.0


def get_defaults(session: Session, project: str) -> ProjectDefaults | None:
    return session.get(ProjectDefaults, project)


def lease_hours(session: Session, project: str, asked: float | None) -> float:
    """The lease a machine of `project` gets: as asked, else the project's default, else 12 h."""
    if asked is not None:
        return asked
    row = get_defaults(session, project)
    return row.lease_hours if row is not None and row.lease_hours is not None else DEFAULT_LEASE_HOURS


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
