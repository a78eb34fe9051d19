"""coupons: coupon (the terms) and subscription_discount (a subscription's redemption)

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05

No coupon is inserted: coupons are created through the API (``POST /coupons``).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = sa.TIMESTAMP(timezone=True)


def upgrade() -> None:
    op.create_table(
        "coupon",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("code", sa.String(length=64), nullable=False),
        sa.Column("percent_off_bp", sa.Integer(), nullable=True),
        sa.Column("amount_off", sa.BigInteger(), nullable=True),
        sa.Column("currency", sa.String(length=3), nullable=True),
        sa.Column("duration", sa.String(length=10), nullable=False),
        sa.Column("duration_periods", sa.Integer(), nullable=True),
        sa.Column("max_redemptions", sa.Integer(), nullable=True),
        sa.Column("redeem_by", TZ, nullable=True),
        sa.Column("times_redeemed", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("created_at", TZ, server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "(percent_off_bp IS NULL) <> (amount_off IS NULL)", name=op.f("ck_coupon_one_discount")
        ),
        sa.CheckConstraint(
            "percent_off_bp > 0 AND percent_off_bp <= 10000", name=op.f("ck_coupon_percent_off_bp")
        ),
        sa.CheckConstraint("amount_off > 0", name=op.f("ck_coupon_amount_off_positive")),
        sa.CheckConstraint(
            "(amount_off IS NULL) = (currency IS NULL)", name=op.f("ck_coupon_currency")
        ),
        sa.CheckConstraint("currency ~ '^[A-Z]{3}$'", name=op.f("ck_coupon_currency_iso4217")),
        sa.CheckConstraint(
            "duration IN ('ONCE', 'REPEATING', 'FOREVER')", name=op.f("ck_coupon_duration")
        ),
        sa.CheckConstraint(
            "(duration = 'REPEATING') = (duration_periods IS NOT NULL) AND duration_periods >= 1",
            name=op.f("ck_coupon_duration_periods"),
        ),
        sa.CheckConstraint("max_redemptions >= 1", name=op.f("ck_coupon_max_redemptions_positive")),
        sa.CheckConstraint(
            "times_redeemed >= 0 AND "
            "(max_redemptions IS NULL OR times_redeemed <= max_redemptions)",
            name=op.f("ck_coupon_times_redeemed"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_coupon")),
        sa.UniqueConstraint("code", name=op.f("uq_coupon_code")),
    )
    op.create_table(
        "subscription_discount",
        sa.Column("subscription_id", sa.BigInteger(), nullable=False),
        sa.Column("coupon_code", sa.String(length=64), nullable=False),
        sa.Column("from_period", sa.Integer(), nullable=False),
        sa.Column("until_period", sa.Integer(), nullable=True),
        sa.Column("applied_at", TZ, nullable=False),
        sa.CheckConstraint(
            "from_period >= 0", name=op.f("ck_subscription_discount_from_period_non_negative")
        ),
        sa.CheckConstraint(
            "until_period > from_period", name=op.f("ck_subscription_discount_until_after_from")
        ),
        sa.ForeignKeyConstraint(
            ["coupon_code"],
            ["coupon.code"],
            name=op.f("fk_subscription_discount_coupon_code_coupon"),
        ),
        sa.ForeignKeyConstraint(
            ["subscription_id"],
            ["subscription.id"],
            name=op.f("fk_subscription_discount_subscription_id_subscription"),
        ),
        sa.PrimaryKeyConstraint("subscription_id", name=op.f("pk_subscription_discount")),
    )


def downgrade() -> None:
    op.drop_table("subscription_discount")
    op.drop_table("coupon")
