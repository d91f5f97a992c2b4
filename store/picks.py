"""Backend defaults (store/models.py BackendPick): the offer a project picked in a backend's offers
table, which a request naming that backend with no GPU and no instance type gets."""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from store.models import BackendPick, utcnow


def get_pick(session: Session, project: str, provider: str) -> BackendPick | None:
    """The offer `project` picked as `provider`'s default, or None."""
    return session.get(BackendPick, (project, provider))


def clear_pick(session: Session, project: str, provider: str) -> bool:
    """Forget `project`'s default offer for `provider` and commit; False when there was none."""
    row = session.get(BackendPick, (project, provider))
    if row is None:
        return False
    session.delete(row)
    session.commit()
    return True


def save_pick(session: Session, *, project: str, provider: str, instance_type: str, region: str, spot: bool,
              gpu_label: str | None, price_per_hour: float | None) -> BackendPick:
    """Make this offer `provider`'s default in `project` (replacing any earlier pick) and commit."""
    row = session.get(BackendPick, (project, provider))
    if row is None:
        row = BackendPick(project=project, provider=provider, instance_type=instance_type, region=region)
    row.instance_type, row.region, row.spot = instance_type, region, spot
    row.gpu_label, row.price_per_hour, row.picked_at = gpu_label, price_per_hour, utcnow()
    session.add(row)
    try:
        session.commit()
    except IntegrityError:  # a concurrent first pick inserted it: this one replaces it
        session.rollback()
        return save_pick(session, project=project, provider=provider, instance_type=instance_type,
                         region=region, spot=spot, gpu_label=gpu_label, price_per_hour=price_per_hour)
    session.refresh(row)
    return row
