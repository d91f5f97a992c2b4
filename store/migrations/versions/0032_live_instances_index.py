"""live instances indexes: the Cloud tab's active page reads its rows in order, its providers' totals
the index alone

`instance (project, created_at, id) WHERE status IN (the live statuses)`: the Cloud tab's "Active
cloud instances" (`GET /instances?status=active`, 50 rows a page) found the project's live rows
through (project, status, created_at) — one range per status — and sorted all of them (413 at
10,000 machines) to return 50. This index holds them in page order: the page reads its 50.
`instance (project, connection_id, price_per_hour, status) WHERE status IN (the live statuses)`: the providers
list's live count and $/hr per connection read every live row of the project from the table; this
answers it from the index (`status` in it too: SQLite reads the table for a column the index lacks,
even one the predicate settles).

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0032"
down_revision: str | Sequence[str] | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_LIVE = "status IN ('provisioning', 'ready', 'terminating')"  # store/models.py LIVE_PREDICATE, as of now


def upgrade() -> None:
    op.create_index("ix_instance_live_project_created_at", "instance", ["project", "created_at", "id"],
                    sqlite_where=sa.text(_LIVE), postgresql_where=sa.text(_LIVE))
    op.create_index("ix_instance_live_project_connection", "instance",
                    ["project", "connection_id", "price_per_hour", "status"],
                    sqlite_where=sa.text(_LIVE), postgresql_where=sa.text(_LIVE))


def downgrade() -> None:
    op.drop_index("ix_instance_live_project_connection", "instance")
    op.drop_index("ix_instance_live_project_created_at", "instance")
