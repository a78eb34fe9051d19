"""invoice_line: the line items an invoice's amount is the sum of

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05

Existing invoices get their lines from their own figures: one line for the period (RENEWAL) or
the plan change (PRORATION) worth the subtotal, and a CREDIT_APPLIED line for the credit they
consumed. A proration invoice written before lines existed keeps its net amount as one line (the
charge and the credit of the change were not stored apart).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KINDS = (
    "PLAN_PERIOD",
    "PRORATION_CHARGE",
    "PRORATION_CREDIT",
    "DISCOUNT",
    "TAX",
    "CREDIT_APPLIED",
)
_REDUCING = ("CREDIT_APPLIED", "DISCOUNT", "PRORATION_CREDIT")


def _in(values: tuple[str, ...]) -> str:
    return f"kind IN ({', '.join(repr(v) for v in values)})"


def upgrade() -> None:
    op.create_table(
        "invoice_line",
        sa.Column("invoice_id", sa.BigInteger(), nullable=False),
        sa.Column("line_no", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("quantity", sa.Integer(), nullable=False),
        sa.Column("unit_amount", sa.BigInteger(), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("period_start", sa.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("period_end", sa.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("tax_inclusive", sa.Boolean(), nullable=True),
        sa.CheckConstraint(_in(_KINDS), name=op.f("ck_invoice_line_kind")),
        sa.CheckConstraint(
            "(kind = 'TAX') = (tax_inclusive IS NOT NULL)",
            name=op.f("ck_invoice_line_tax_inclusive"),
        ),
        sa.CheckConstraint("line_no >= 1", name=op.f("ck_invoice_line_line_no_positive")),
        sa.CheckConstraint("quantity >= 1", name=op.f("ck_invoice_line_quantity_positive")),
        sa.CheckConstraint("amount = quantity * unit_amount", name=op.f("ck_invoice_line_amount")),
        sa.CheckConstraint(
            f"({_in(_REDUCING)}) = (amount < 0) OR amount = 0", name=op.f("ck_invoice_line_sign")
        ),
        sa.CheckConstraint(
            "period_start IS NULL AND period_end IS NULL OR period_end > period_start",
            name=op.f("ck_invoice_line_period_order"),
        ),
        sa.ForeignKeyConstraint(
            ["invoice_id"],
            ["invoice.id"],
            name=op.f("fk_invoice_line_invoice_id_invoice"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("invoice_id", "line_no", name=op.f("pk_invoice_line")),
    )
    op.execute(
        """
        INSERT INTO invoice_line (invoice_id, line_no, kind, description, quantity, unit_amount,
                                  amount, period_start, period_end)
        SELECT id, 1,
               CASE kind WHEN 'PRORATION' THEN 'PRORATION_CHARGE' ELSE 'PLAN_PERIOD' END,
               CASE kind WHEN 'PRORATION' THEN 'Plan change for the rest of the period'
                         ELSE 'Subscription period' END,
               1, subtotal, subtotal, period_start, period_end
        FROM invoice
        UNION ALL
        SELECT id, 2, 'CREDIT_APPLIED', 'Credit applied', 1, -credit_applied, -credit_applied,
               NULL, NULL
        FROM invoice WHERE credit_applied > 0
        """
    )


def downgrade() -> None:
    op.drop_table("invoice_line")
