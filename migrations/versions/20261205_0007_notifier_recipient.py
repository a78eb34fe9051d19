"""notifier_recipient: the notifier's subscription -> customer memory

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05

Only SubscriptionCreated names the customer; the reference notifier keeps it per subscription
so the e-mails of later events go to the customer instead of a fallback address.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "notifier_recipient",
        sa.Column("subscription_id", sa.BigInteger(), nullable=False),
        sa.Column("customer_id", sa.BigInteger(), nullable=False),
        sa.Column(
            "learned_at",
            sa.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("subscription_id", name=op.f("pk_notifier_recipient")),
    )


def downgrade() -> None:
    op.drop_table("notifier_recipient")
