"""customer: who subscriptions bill (external id, e-mail, name, default time zone and currency)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05

Until now a customer was a bare number on subscription (and invoice, gateway_customer). Every
number already in use becomes a customer row with that id, its external id the number as text
and its time zone the one of its first subscription, so existing subscriptions keep working and
can be listed by customer; the id sequence starts after the highest one. The index of
subscription by customer gains the id (a customer's subscriptions, paged newest first).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = postgresql.TIMESTAMP(timezone=True)


def upgrade() -> None:
    op.create_table(
        "customer",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("external_id", sa.String(length=255), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=True),
        sa.Column("name", sa.Text(), nullable=True),
        sa.Column("time_zone", sa.Text(), server_default=sa.text("'UTC'"), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=True),
        sa.Column("created_at", TZ, server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", TZ, server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("currency ~ '^[A-Z]{3}$'", name=op.f("ck_customer_currency_iso4217")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_customer")),
        sa.UniqueConstraint("external_id", name=op.f("uq_customer_external_id")),
    )
    op.execute(
        """
        INSERT INTO customer (id, external_id, time_zone)
        SELECT ids.customer_id, ids.customer_id::text,
               COALESCE((SELECT s.time_zone FROM subscription s
                         WHERE s.customer_id = ids.customer_id ORDER BY s.id LIMIT 1), 'UTC')
        FROM (SELECT customer_id FROM subscription
              UNION SELECT customer_id FROM gateway_customer) AS ids
        """
    )
    op.execute(
        "SELECT setval(pg_get_serial_sequence('customer', 'id'), "
        "COALESCE((SELECT max(id) FROM customer), 0) + 1, false)"
    )
    op.create_index(
        "ix_subscription_customer_id_id", "subscription", ["customer_id", "id"], unique=False
    )
    op.drop_index("ix_subscription_customer_id", table_name="subscription")


def downgrade() -> None:
    op.create_index("ix_subscription_customer_id", "subscription", ["customer_id"], unique=False)
    op.drop_index("ix_subscription_customer_id_id", table_name="subscription")
    op.drop_table("customer")
