"""refunds, requested voids and reconciliation items

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-05

* ``invoice.void_requested_at``: a cancel while the invoice's gateway call may be in flight; the
  call's result decides (VOID, or VOID and refunded).
* ``refund``: money given back for a charge the invoice cannot keep (one per charge, sent by the
  collector with the key ``ref-{payment attempt id}``).
* ``reconciliation_item``: what needs a person, and who settled it. The reconciliation requests
  already announced (``PaymentReconciliationNeeded`` events still in the outbox) become open
  items, so ``billing reconcile`` lists them too.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = postgresql.TIMESTAMP(timezone=True)


def upgrade() -> None:
    op.add_column("invoice", sa.Column("void_requested_at", TZ, nullable=True))
    op.create_index(
        "idx_inv_void_requested",
        "invoice",
        ["next_attempt_at"],
        unique=False,
        postgresql_where=sa.text("status = 'OPEN' AND void_requested_at IS NOT NULL"),
    )
    op.create_table(
        "refund",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("invoice_id", sa.BigInteger(), nullable=False),
        sa.Column("subscription_id", sa.BigInteger(), nullable=False),
        sa.Column("payment_attempt_id", sa.BigInteger(), nullable=False),
        sa.Column("charge_key", sa.String(length=100), nullable=False),
        sa.Column("charge_reference", sa.Text(), nullable=True),
        sa.Column("idempotency_key", sa.String(length=100), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("reason", sa.String(length=40), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("gateway_reference", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("uncertain_answers", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("next_attempt_at", TZ, nullable=True),
        sa.Column("requested_at", TZ, nullable=False),
        sa.Column("completed_at", TZ, nullable=True),
        sa.Column("updated_at", TZ, server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("amount > 0", name=op.f("ck_refund_amount_positive")),
        sa.CheckConstraint("currency ~ '^[A-Z]{3}$'", name=op.f("ck_refund_currency_iso4217")),
        sa.CheckConstraint(
            "status IN ('REQUESTED', 'SUCCEEDED', 'FAILED')", name=op.f("ck_refund_status")
        ),
        sa.ForeignKeyConstraint(
            ["invoice_id"], ["invoice.id"], name=op.f("fk_refund_invoice_id_invoice")
        ),
        sa.ForeignKeyConstraint(
            ["payment_attempt_id"],
            ["payment_attempt.id"],
            name=op.f("fk_refund_payment_attempt_id_payment_attempt"),
        ),
        sa.ForeignKeyConstraint(
            ["subscription_id"],
            ["subscription.id"],
            name=op.f("fk_refund_subscription_id_subscription"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_refund")),
        sa.UniqueConstraint("charge_key", name=op.f("uq_refund_charge_key")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_refund_idempotency_key")),
    )
    op.create_index(
        "idx_refund_due",
        "refund",
        ["next_attempt_at"],
        unique=False,
        postgresql_where=sa.text("status = 'REQUESTED'"),
    )
    op.create_index("ix_refund_invoice_id", "refund", ["invoice_id"], unique=False)
    op.create_table(
        "reconciliation_item",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("invoice_id", sa.BigInteger(), nullable=False),
        sa.Column("subscription_id", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=100), nullable=True),
        sa.Column("gateway_reference", sa.Text(), nullable=True),
        sa.Column("payment_attempt_id", sa.BigInteger(), nullable=True),
        sa.Column("refund_id", sa.BigInteger(), nullable=True),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("resolved_at", TZ, nullable=True),
        sa.Column("resolved_by", sa.Text(), nullable=True),
        sa.Column("resolution", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "(resolved_at IS NULL) = (resolved_by IS NULL)",
            name=op.f("ck_reconciliation_item_resolved_with_who"),
        ),
        sa.ForeignKeyConstraint(
            ["invoice_id"], ["invoice.id"], name=op.f("fk_reconciliation_item_invoice_id_invoice")
        ),
        sa.ForeignKeyConstraint(
            ["payment_attempt_id"],
            ["payment_attempt.id"],
            name=op.f("fk_reconciliation_item_payment_attempt_id_payment_attempt"),
        ),
        sa.ForeignKeyConstraint(
            ["refund_id"], ["refund.id"], name=op.f("fk_reconciliation_item_refund_id_refund")
        ),
        sa.ForeignKeyConstraint(
            ["subscription_id"],
            ["subscription.id"],
            name=op.f("fk_reconciliation_item_subscription_id_subscription"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reconciliation_item")),
    )
    op.create_index(
        "idx_reconciliation_open",
        "reconciliation_item",
        ["id"],
        unique=False,
        postgresql_where=sa.text("resolved_at IS NULL"),
    )
    op.create_index(
        "ix_reconciliation_item_invoice_id", "reconciliation_item", ["invoice_id"], unique=False
    )
    op.execute(
        """
        INSERT INTO reconciliation_item (invoice_id, subscription_id, kind, reason,
                                         idempotency_key, gateway_reference, created_at)
        SELECT i.id, i.subscription_id,
               left(split_part(o.payload ->> 'reason', ':', 1), 40), o.payload ->> 'reason',
               o.payload ->> 'idempotencyKey', o.payload ->> 'gatewayReference', o.occurred_at
        FROM outbox_event o
        JOIN invoice i ON i.id = CAST(o.payload ->> 'invoiceId' AS bigint)
        WHERE o.event_type = 'PaymentReconciliationNeeded'
        ORDER BY o.id
        """
    )


def downgrade() -> None:
    op.drop_index("ix_reconciliation_item_invoice_id", table_name="reconciliation_item")
    op.drop_index(
        "idx_reconciliation_open",
        table_name="reconciliation_item",
        postgresql_where=sa.text("resolved_at IS NULL"),
    )
    op.drop_table("reconciliation_item")
    op.drop_index("ix_refund_invoice_id", table_name="refund")
    op.drop_index(
        "idx_refund_due", table_name="refund", postgresql_where=sa.text("status = 'REQUESTED'")
    )
    op.drop_table("refund")
    op.drop_index(
        "idx_inv_void_requested",
        table_name="invoice",
        postgresql_where=sa.text("status = 'OPEN' AND void_requested_at IS NOT NULL"),
    )
    op.drop_column("invoice", "void_requested_at")
