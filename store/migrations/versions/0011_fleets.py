"""fleets: SSH / on-prem fleets (sealed private key) and their hosts with each one's last probe

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01

Written beside other revisions on parallel branches: the merge chains them one after the other.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "fleet",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("project", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("user", sa.String(), nullable=False),
        sa.Column("port", sa.Integer(), nullable=False),
        sa.Column("secret", sa.LargeBinary(), nullable=False),
        sa.Column("bastion_host", sa.String(), nullable=True),
        sa.Column("bastion_port", sa.Integer(), nullable=True),
        sa.Column("bastion_user", sa.String(), nullable=True),
        sa.Column("bastion_secret", sa.LargeBinary(), nullable=True),
        sa.Column("probe_id", sa.String(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_fleet_project", "fleet", ["project"])
    op.create_table(
        "fleet_host",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("fleet_id", sa.String(), sa.ForeignKey("fleet.id"), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(), nullable=False),
        sa.Column("probed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reachable", sa.Boolean(), nullable=True),
        sa.Column("reason", sa.String(), nullable=True),
        sa.Column("gpu_vendor", sa.String(), nullable=True),
        sa.Column("gpu_name", sa.String(), nullable=True),
        sa.Column("gpu_count", sa.Integer(), nullable=True),
        sa.Column("gpu_memory_gb", sa.Integer(), nullable=True),
        sa.Column("gpu_summary", sa.String(), nullable=True),
        sa.Column("docker", sa.Boolean(), nullable=True),
        sa.Column("sudo", sa.Boolean(), nullable=True),
        sa.Column("tcp_forwarding", sa.Boolean(), nullable=True),
    )
    op.create_index("ix_fleet_host_fleet_id", "fleet_host", ["fleet_id"])


def downgrade() -> None:
    op.drop_index("ix_fleet_host_fleet_id", "fleet_host")
    op.drop_table("fleet_host")
    op.drop_index("ix_fleet_project", "fleet")
    op.drop_table("fleet")
