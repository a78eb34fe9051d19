"""paused subscriptions: a partial index of their ids

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07

The collector claims and counts only the OPEN invoices of subscriptions that are not paused.
Over a backlog of due invoices the planner hashes the paused subscriptions, and without an index
found them by reading the whole subscription table (1.4 s at 5 M subscriptions); this index
holds only the paused ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "idx_sub_paused",
        "subscription",
        ["id"],
        postgresql_where=sa.text("paused_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("idx_sub_paused", table_name="subscription")
