"""taxes: tax_rate (the built-in calculator's table) and subscription_tax_location

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05

No rate is inserted: rates are the operator's (``billing_core.domain.tax``); a subscription
without a tax location, or in a place without a rate, is not taxed.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tax_rate",
        sa.Column("country", sa.String(length=2), nullable=False),
        sa.Column("region", sa.String(length=10), server_default=sa.text("''"), nullable=False),
        sa.Column("rate_ppm", sa.Integer(), nullable=False),
        sa.Column("inclusive", sa.Boolean(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.CheckConstraint(
            "rate_ppm >= 0 AND rate_ppm < 1000000", name=op.f("ck_tax_rate_rate_ppm")
        ),
        sa.CheckConstraint("country ~ '^[A-Z]{2}$'", name=op.f("ck_tax_rate_country_iso3166")),
        sa.PrimaryKeyConstraint("country", "region", name=op.f("pk_tax_rate")),
    )
    op.create_table(
        "subscription_tax_location",
        sa.Column("subscription_id", sa.BigInteger(), nullable=False),
        sa.Column("country", sa.String(length=2), nullable=False),
        sa.Column("region", sa.String(length=10), server_default=sa.text("''"), nullable=False),
        sa.Column("updated_at", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.CheckConstraint(
            "country ~ '^[A-Z]{2}$'", name=op.f("ck_subscription_tax_location_country_iso3166")
        ),
        sa.ForeignKeyConstraint(
            ["subscription_id"],
            ["subscription.id"],
            name=op.f("fk_subscription_tax_location_subscription_id_subscription"),
        ),
        sa.PrimaryKeyConstraint("subscription_id", name=op.f("pk_subscription_tax_location")),
    )


def downgrade() -> None:
    op.drop_table("subscription_tax_location")
    op.drop_table("tax_rate")
