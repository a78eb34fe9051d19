"""document numbers: invoice.number, refund.credit_note_number, document_series counters

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05

Existing invoices and succeeded refunds are left unnumbered: the renewer's numbering pass gives
them their numbers, oldest first, like any new one.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "document_series",
        sa.Column("series", sa.String(length=20), nullable=False),
        sa.Column("last_number", sa.BigInteger(), nullable=False),
        sa.CheckConstraint(
            "last_number >= 0", name=op.f("ck_document_series_last_number_non_negative")
        ),
        sa.PrimaryKeyConstraint("series", name=op.f("pk_document_series")),
    )
    op.add_column("invoice", sa.Column("number", sa.String(length=32), nullable=True))
    op.create_unique_constraint(op.f("uq_invoice_number"), "invoice", ["number"])
    op.create_index(
        "idx_inv_unnumbered",
        "invoice",
        ["id"],
        unique=False,
        postgresql_where=sa.text("number IS NULL"),
    )
    op.add_column("refund", sa.Column("credit_note_number", sa.String(length=32), nullable=True))
    op.create_unique_constraint(
        op.f("uq_refund_credit_note_number"), "refund", ["credit_note_number"]
    )
    op.create_index(
        "idx_refund_unnumbered",
        "refund",
        ["id"],
        unique=False,
        postgresql_where=sa.text("status = 'SUCCEEDED' AND credit_note_number IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("idx_refund_unnumbered", table_name="refund")
    op.drop_constraint(op.f("uq_refund_credit_note_number"), "refund", type_="unique")
    op.drop_column("refund", "credit_note_number")
    op.drop_index("idx_inv_unnumbered", table_name="invoice")
    op.drop_constraint(op.f("uq_invoice_number"), "invoice", type_="unique")
    op.drop_column("invoice", "number")
    op.drop_table("document_series")
