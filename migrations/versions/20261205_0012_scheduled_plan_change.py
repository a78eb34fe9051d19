"""scheduled plan change: subscription.scheduled_plan_id

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05

A plan change asked for the period end (``effective: period_end``) is stored on the
subscription and applied by the renewer when it renews: the new period is invoiced at that
plan. Null: nothing scheduled. Existing rows have nothing scheduled.

Downgrade drops what is scheduled (those changes are then not applied).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("subscription", sa.Column("scheduled_plan_id", sa.BigInteger(), nullable=True))
    op.create_foreign_key(
        op.f("fk_subscription_scheduled_plan_id_plan"),
        "subscription",
        "plan",
        ["scheduled_plan_id"],
        ["id"],
    )


def downgrade() -> None:
    op.drop_constraint(
        op.f("fk_subscription_scheduled_plan_id_plan"), "subscription", type_="foreignkey"
    )
    op.drop_column("subscription", "scheduled_plan_id")
