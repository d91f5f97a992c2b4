"""offer answers: the offers pages' cache shared by every API process

`offer_answer (key, expires_at, offers)`: a connection's answer to one offers query, kept for the
offers cache's TTL where every API process (and replica) finds it — each kept its own, so a request
that reached another process asked the cloud again (Vast.ai's search, paced at one per 6 s per key,
made it wait). store/offer_answers.py.

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0035"
down_revision: str | Sequence[str] | None = "0034"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "offer_answer",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("offers", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("key"))
    op.create_index("ix_offer_answer_expires_at", "offer_answer", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_offer_answer_expires_at", "offer_answer")
    op.drop_table("offer_answer")
