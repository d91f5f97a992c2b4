"""What the database holds, as Prometheus gauges read at scrape time (README: Metrics): allocations by
status and by phase, jobs by status, and the running $/hr of each project. A custom collector, so
each scrape counts the rows as they are (no state kept in the process, nothing to drift).

Label values are bounded: a status or phase is one of its enum's values (anything else reads
`other`), a project is its id — a slug the admin token chose (PROJECT_PATTERN), never free text —
and any value that is not a slug reads `other`. No allocation, job or connection id, name, command
or note is ever a label."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import sqlalchemy as sa
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlmodel import Session, func, select

from messages.enums import AllocationStatus, Phase
from messages.workloads import WorkloadStatus
from store.instances import LIVE_STATUSES
from store.models import Instance, Job, Project

OTHER = "other"  # the label value of anything outside a label's known set
# api/fields.py PROJECT_PATTERN (store/ does not import api/): what a project id may be.
PROJECT_SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def bounded(value: str | None, allowed: Iterable[str]) -> str:
    """`value` when it is one of `allowed`, else `other`: a label never takes an unexpected value."""
    return value if value is not None and value in set(allowed) else OTHER


def project_label(project: str | None) -> str:
    """A project's label: its id when it is a slug, else `other` (an id is the only project label)."""
    return project if project is not None and PROJECT_SLUG.match(project) else OTHER


def _counts(session: Session, column: sa.ColumnElement[str], allowed: Iterable[str]) -> dict[str, float]:
    """Rows per value of `column`, every allowed value present (0 when none), others under `other`."""
    known = list(allowed)
    counts = {value: 0.0 for value in known}
    for value, n in session.exec(select(column, func.count()).group_by(column)).all():
        label = bounded(value, known)
        counts[label] = counts.get(label, 0.0) + n
    return counts


def _spend(session: Session) -> dict[str, float]:
    """$/hr of every project's live allocations (provisioning, ready, terminating: the machines that
    may bill), by project label; every project is present (0 when nothing of it bills)."""
    rates = {project_label(p): 0.0 for p in session.exec(select(Project.id)).all()}
    rows = session.exec(select(Instance.project, func.sum(Instance.price_per_hour))
                        .where(Instance.status.in_(sorted(LIVE_STATUSES)))  # type: ignore[attr-defined]
                        .where(Instance.price_per_hour.is_not(None))  # type: ignore[union-attr]
                        .group_by(Instance.project)).all()
    for project, rate in rows:
        label = project_label(project)
        rates[label] = rates.get(label, 0.0) + float(rate or 0.0)
    return rates


class DatabaseCollector(Collector):
    """The database's gauges, read on each scrape (a few GROUP BY queries on indexed columns)."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with Session(self.engine) as session:
            by_status = _counts(session, Instance.status, [s.value for s in AllocationStatus])  # type: ignore[arg-type]
            by_phase = _counts(session, Instance.phase, [p.value for p in Phase])  # type: ignore[arg-type]
            jobs = _counts(session, Job.status, [s.value for s in WorkloadStatus])  # type: ignore[arg-type]
            spend = _spend(session)
        yield _gauge("gpuprov_allocations", "Allocations (instance rows) by status.", "status", by_status)
        yield _gauge("gpuprov_allocations_by_phase", "Allocations (instance rows) by phase.", "phase",
                     by_phase)
        yield _gauge("gpuprov_jobs", "Managed jobs by status.", "status", jobs)
        yield _gauge("gpuprov_running_usd_per_hour",
                     "Sum of the $/hr of each project's live allocations (provisioning, ready, terminating).",
                     "project", spend)


def _gauge(name: str, doc: str, label: str, values: dict[str, float]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=[label])
    for value, n in sorted(values.items()):
        family.add_metric([value], n)
    return family
