"""gateway_customer: our customer id -> the gateway's customer and default payment method

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-05

The Stripe adapter charges a customer's default payment method off-session; this table says
which Stripe customer and payment method that is. Ids only, never card data. Keyed by our
customer id (a bare BIGINT, as on subscription): no customer table exists yet.

Also an index of payment_attempt by gateway_reference (where there is one): Stripe's refund and
dispute events name the charge only by its PaymentIntent id. Built in the migration's
transaction (writes to payment_attempt wait for it).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "gateway_customer",
        sa.Column("customer_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("gateway", sa.String(length=20), nullable=False),
        sa.Column("gateway_customer_id", sa.String(length=255), nullable=False),
        sa.Column("payment_method_id", sa.String(length=255), nullable=False),
        sa.Column("created_at", postgresql.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("updated_at", postgresql.TIMESTAMP(timezone=True), nullable=False),
        sa.CheckConstraint("gateway IN ('stripe')", name=op.f("ck_gateway_customer_gateway")),
        sa.PrimaryKeyConstraint("customer_id", name=op.f("pk_gateway_customer")),
    )
    op.create_index(
        "ix_payment_attempt_gateway_reference",
        "payment_attempt",
        ["gateway_reference"],
        postgresql_where=sa.text("gateway_reference IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_payment_attempt_gateway_reference", table_name="payment_attempt")
    op.drop_table("gateway_customer")
