"""payment_attempt.source IMPORT: payments made before the system, imported as history

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03

A SUCCESS attempt with source IMPORT records that an invoice was paid outside this system (a
migrated or seeded history): the invariant checker takes it as the invoice's one successful
charge, which the gateway ledger cannot show, and expects no InvoicePaid event for it.

The downgrade restores the old constraint; PostgreSQL refuses it while IMPORT rows exist (they
are history, not something a downgrade should delete).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NAME = "ck_payment_attempt_source"


def upgrade() -> None:
    op.drop_constraint(op.f(_NAME), "payment_attempt", type_="check")
    op.create_check_constraint(
        op.f(_NAME), "payment_attempt", "source IN ('COLLECTOR', 'WEBHOOK', 'IMPORT')"
    )


def downgrade() -> None:
    op.drop_constraint(op.f(_NAME), "payment_attempt", type_="check")
    op.create_check_constraint(op.f(_NAME), "payment_attempt", "source IN ('COLLECTOR', 'WEBHOOK')")
