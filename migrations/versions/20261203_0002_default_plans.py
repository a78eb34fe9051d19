"""default plan catalogue

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# code, name, price in minor units, currency, interval
PLANS = [
    ("BASIC_MONTHLY", "Basic, monthly", 990, "EUR", "MONTH"),
    ("PRO_MONTHLY", "Pro, monthly", 2990, "EUR", "MONTH"),
    ("BUSINESS_MONTHLY", "Business, monthly", 9990, "EUR", "MONTH"),
    ("BASIC_YEARLY", "Basic, yearly", 9900, "EUR", "YEAR"),
    ("PRO_YEARLY", "Pro, yearly", 29900, "EUR", "YEAR"),
    ("TEAM_MONTHLY_USD", "Team, monthly (USD)", 4900, "USD", "MONTH"),
    ("JPY_MONTHLY", "Standard, monthly (JPY)", 1500, "JPY", "MONTH"),
]


def upgrade() -> None:
    plan = sa.table(
        "plan",
        sa.column("code", sa.String),
        sa.column("name", sa.Text),
        sa.column("price_amount", sa.BigInteger),
        sa.column("currency", sa.String),
        sa.column("billing_interval", sa.String),
    )
    op.bulk_insert(
        plan,
        [
            {"code": c, "name": n, "price_amount": p, "currency": cur, "billing_interval": i}
            for c, n, p, cur, i in PLANS
        ],
    )


def downgrade() -> None:
    codes = ", ".join(f"'{c}'" for c, *_ in PLANS)
    op.execute(f"DELETE FROM plan WHERE code IN ({codes})")
