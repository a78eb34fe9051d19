"""payment_attempt.source LOOKUP: what a look-up by idempotency key said

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-05

After an uncertain answer the collector asks the gateway what happened to that key before it
retries; the answer is recorded like a charge result, with source LOOKUP, so the audit shows
that the outcome came from a look-up and not from a charge call.

The downgrade restores the old constraint; PostgreSQL refuses it while LOOKUP rows exist (they
are the record of real payments).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NAME = "ck_payment_attempt_source"


def upgrade() -> None:
    op.drop_constraint(op.f(_NAME), "payment_attempt", type_="check")
    op.create_check_constraint(
        op.f(_NAME), "payment_attempt", "source IN ('COLLECTOR', 'WEBHOOK', 'IMPORT', 'LOOKUP')"
    )


def downgrade() -> None:
    op.drop_constraint(op.f(_NAME), "payment_attempt", type_="check")
    op.create_check_constraint(
        op.f(_NAME), "payment_attempt", "source IN ('COLLECTOR', 'WEBHOOK', 'IMPORT')"
    )
