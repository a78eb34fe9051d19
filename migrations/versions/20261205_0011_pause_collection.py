"""pause collection: subscription.pause_behavior / paused_at / pause_resumes_at, invoice DRAFT

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05

A paused subscription (``pause_behavior`` set: ``void`` or ``keep_as_draft``) keeps renewing,
but the renewal invoices of its paused periods are created VOID or DRAFT and never collected;
its OPEN invoices are not collected either until it resumes. ``pause_resumes_at`` (optional)
is when the renewer resumes it; a partial index finds those. Existing rows are not paused.

Downgrade refuses while a subscription is paused or an invoice is DRAFT (the older schema
cannot hold them).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = postgresql.TIMESTAMP(timezone=True)
OLD_INVOICE_STATUSES = "status IN ('OPEN', 'PAID', 'FAILED', 'VOID')"
NEW_INVOICE_STATUSES = "status IN ('DRAFT', 'OPEN', 'PAID', 'FAILED', 'VOID')"
PAUSE_BEHAVIOR = "pause_behavior IN ('void', 'keep_as_draft')"
PAUSE_COMPLETE = (
    "(pause_behavior IS NULL) = (paused_at IS NULL) "
    "AND (pause_resumes_at IS NULL OR paused_at IS NOT NULL)"
)


def upgrade() -> None:
    op.add_column("subscription", sa.Column("pause_behavior", sa.String(20), nullable=True))
    op.add_column("subscription", sa.Column("paused_at", TZ, nullable=True))
    op.add_column("subscription", sa.Column("pause_resumes_at", TZ, nullable=True))
    op.create_check_constraint(
        op.f("ck_subscription_pause_behavior"), "subscription", PAUSE_BEHAVIOR
    )
    op.create_check_constraint(
        op.f("ck_subscription_pause_complete"), "subscription", PAUSE_COMPLETE
    )
    op.create_index(
        "idx_sub_pause_resumes",
        "subscription",
        ["pause_resumes_at"],
        postgresql_where=sa.text("pause_resumes_at IS NOT NULL"),
    )
    op.drop_constraint(op.f("ck_invoice_status"), "invoice", type_="check")
    op.create_check_constraint(op.f("ck_invoice_status"), "invoice", NEW_INVOICE_STATUSES)


def downgrade() -> None:
    op.execute(
        """
        DO $$
        BEGIN
            IF EXISTS (SELECT 1 FROM subscription WHERE paused_at IS NOT NULL)
               OR EXISTS (SELECT 1 FROM invoice WHERE status = 'DRAFT') THEN
                RAISE EXCEPTION 'paused subscriptions or DRAFT invoices exist: resume them and '
                                'settle the drafts before downgrading below 0011';
            END IF;
        END $$
        """
    )
    op.drop_constraint(op.f("ck_invoice_status"), "invoice", type_="check")
    op.create_check_constraint(op.f("ck_invoice_status"), "invoice", OLD_INVOICE_STATUSES)
    op.drop_index("idx_sub_pause_resumes", table_name="subscription")
    op.drop_constraint(op.f("ck_subscription_pause_complete"), "subscription", type_="check")
    op.drop_constraint(op.f("ck_subscription_pause_behavior"), "subscription", type_="check")
    op.drop_column("subscription", "pause_resumes_at")
    op.drop_column("subscription", "paused_at")
    op.drop_column("subscription", "pause_behavior")
