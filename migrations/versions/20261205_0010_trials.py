"""trials: plan.trial_days, subscription.trial_end / trial_will_end_sent_at, status TRIALING

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05

A subscription in a free trial is TRIALING: its current period is the trial, ending at the
billing anchor, and the renewer invoices period 0 when the trial ends. The due index
(``idx_sub_due``) covers TRIALING as well as ACTIVE, so the renewer's one claim finds both; a
second partial index finds the trials whose SubscriptionTrialWillEnd is still to be written.
Existing rows are unchanged (no trial).

Downgrade refuses while a subscription is TRIALING (the older schema cannot hold it).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = postgresql.TIMESTAMP(timezone=True)
OLD_STATUSES = "status IN ('ACTIVE', 'PAST_DUE', 'CANCELED')"
NEW_STATUSES = "status IN ('TRIALING', 'ACTIVE', 'PAST_DUE', 'CANCELED')"


def upgrade() -> None:
    op.add_column(
        "plan", sa.Column("trial_days", sa.Integer(), server_default=sa.text("0"), nullable=False)
    )
    op.create_check_constraint(op.f("ck_plan_trial_days"), "plan", "trial_days BETWEEN 0 AND 730")
    op.add_column("subscription", sa.Column("trial_end", TZ, nullable=True))
    op.add_column("subscription", sa.Column("trial_will_end_sent_at", TZ, nullable=True))
    op.drop_constraint(op.f("ck_subscription_status"), "subscription", type_="check")
    op.create_check_constraint(op.f("ck_subscription_status"), "subscription", NEW_STATUSES)
    op.drop_index("idx_sub_due", table_name="subscription")
    op.create_index(
        "idx_sub_due",
        "subscription",
        ["current_period_end"],
        postgresql_where=sa.text("status IN ('ACTIVE', 'TRIALING')"),
    )
    op.create_index(
        "idx_sub_trial_will_end",
        "subscription",
        ["current_period_end"],
        postgresql_where=sa.text("status = 'TRIALING' AND trial_will_end_sent_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("idx_sub_trial_will_end", table_name="subscription")
    op.drop_index("idx_sub_due", table_name="subscription")
    op.create_index(
        "idx_sub_due",
        "subscription",
        ["current_period_end"],
        postgresql_where=sa.text("status = 'ACTIVE'"),
    )
    op.drop_constraint(op.f("ck_subscription_status"), "subscription", type_="check")
    op.create_check_constraint(op.f("ck_subscription_status"), "subscription", OLD_STATUSES)
    op.drop_column("subscription", "trial_will_end_sent_at")
    op.drop_column("subscription", "trial_end")
    op.drop_constraint(op.f("ck_plan_trial_days"), "plan", type_="check")
    op.drop_column("plan", "trial_days")
