"""projects and project tokens; connections belong to a project (existing ones to `default`)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    project = op.create_table(
        "project",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.bulk_insert(project, [{"id": "default", "created_at": datetime.now(UTC)}])
    # Instances may already name other projects (the label was free before 0007): each becomes one.
    op.execute("INSERT INTO project (id, created_at) SELECT DISTINCT project, CURRENT_TIMESTAMP "
               "FROM instance WHERE project <> 'default'")
    op.create_table(
        "api_token",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("project", sa.String(), sa.ForeignKey("project.id"), nullable=False),
        sa.Column("token_hash", sa.String(), nullable=False, unique=True),
        sa.Column("label", sa.String(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_api_token_project", "api_token", ["project"])
    with op.batch_alter_table("connection") as batch:
        batch.add_column(sa.Column("project", sa.String(), nullable=False, server_default="default"))
        batch.create_index("ix_connection_project", ["project"])
    op.create_index("ix_instance_project", "instance", ["project"])


def downgrade() -> None:
    op.drop_index("ix_instance_project", "instance")
    with op.batch_alter_table("connection") as batch:
        batch.drop_index("ix_connection_project")
        batch.drop_column("project")
    op.drop_index("ix_api_token_project", "api_token")
    op.drop_table("api_token")
    op.drop_table("project")
