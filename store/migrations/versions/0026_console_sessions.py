"""console sessions: the Compute console's signed-in browsers (only a digest of each cookie is kept)

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | Sequence[str] | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("id_digest", sa.String(), primary_key=True),
        sa.Column("admin", sa.Boolean(), nullable=False),
        sa.Column("project", sa.String(), nullable=True),
        sa.Column("token_hash", sa.String(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_console_sessions_token_hash", "console_sessions", ["token_hash"])


def downgrade() -> None:
    op.drop_index("ix_console_sessions_token_hash", "console_sessions")
    op.drop_table("console_sessions")
