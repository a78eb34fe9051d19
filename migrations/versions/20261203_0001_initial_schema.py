"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-12-03 05:58:18.105986
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_client",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("key_prefix", sa.String(length=16), nullable=False),
        sa.Column("key_hash", sa.LargeBinary(), nullable=False),
        sa.Column(
            "created_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("revoked_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_client")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_client_key_hash")),
    )
    op.create_table(
        "outbox_event",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("event_id", sa.UUID(), nullable=False),
        sa.Column("aggregate_id", sa.BigInteger(), nullable=False),
        sa.Column("sequence", sa.BigInteger(), nullable=False),
        sa.Column("event_type", sa.String(length=50), nullable=False),
        sa.Column("schema_version", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("payload", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("occurred_at", postgresql.TIMESTAMP(timezone=True), nullable=False),
        sa.Column(
            "created_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("published_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("publish_attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("parked_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox_event")),
        sa.UniqueConstraint(
            "aggregate_id", "sequence", name=op.f("uq_outbox_event_aggregate_id_sequence")
        ),
        sa.UniqueConstraint("event_id", name=op.f("uq_outbox_event_event_id")),
    )
    op.create_index(
        "idx_outbox_unpublished",
        "outbox_event",
        ["id"],
        unique=False,
        postgresql_where=sa.text("published_at IS NULL AND parked_at IS NULL"),
    )
    op.create_index("ix_outbox_event_published_at", "outbox_event", ["published_at"], unique=False)
    op.create_table(
        "plan",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("code", sa.String(length=50), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("price_amount", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("billing_interval", sa.String(length=10), nullable=False),
        sa.Column("active", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column(
            "created_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "billing_interval IN ('MONTH', 'YEAR')", name=op.f("ck_plan_billing_interval")
        ),
        sa.CheckConstraint("currency ~ '^[A-Z]{3}$'", name=op.f("ck_plan_currency_iso4217")),
        sa.CheckConstraint("price_amount >= 0", name=op.f("ck_plan_price_non_negative")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_plan")),
        sa.UniqueConstraint("code", name=op.f("uq_plan_code")),
    )
    op.create_table(
        "processed_event",
        sa.Column("consumer", sa.String(length=100), nullable=False),
        sa.Column("event_id", sa.UUID(), nullable=False),
        sa.Column(
            "processed_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("consumer", "event_id", name=op.f("pk_processed_event")),
    )
    op.create_table(
        "webhook_event",
        sa.Column("event_id", sa.String(length=100), nullable=False),
        sa.Column("event_type", sa.String(length=50), nullable=False),
        sa.Column("invoice_id", sa.BigInteger(), nullable=True),
        sa.Column("payload", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "received_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("event_id", name=op.f("pk_webhook_event")),
    )
    op.create_table(
        "idempotency_key",
        sa.Column("client_id", sa.BigInteger(), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("request_method", sa.String(length=10), nullable=False),
        sa.Column("request_path", sa.Text(), nullable=False),
        sa.Column("request_hash", sa.LargeBinary(), nullable=False),
        sa.Column("response_status", sa.Integer(), nullable=True),
        sa.Column("response_headers", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("response_body", sa.LargeBinary(), nullable=True),
        sa.Column(
            "created_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("completed_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("expires_at", postgresql.TIMESTAMP(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["client_id"], ["api_client.id"], name=op.f("fk_idempotency_key_client_id_api_client")
        ),
        sa.PrimaryKeyConstraint("client_id", "key", name=op.f("pk_idempotency_key")),
    )
    op.create_index(
        "ix_idempotency_key_expires_at", "idempotency_key", ["expires_at"], unique=False
    )
    op.create_table(
        "subscription",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("customer_id", sa.BigInteger(), nullable=False),
        sa.Column("plan_id", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("time_zone", sa.Text(), server_default=sa.text("'UTC'"), nullable=False),
        sa.Column("billing_anchor", postgresql.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("period_index", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("current_period_start", postgresql.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("current_period_end", postgresql.TIMESTAMP(timezone=True), nullable=False),
        sa.Column(
            "cancel_at_period_end", sa.Boolean(), server_default=sa.text("false"), nullable=False
        ),
        sa.Column("canceled_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("credit_balance", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("event_seq", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "created_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "status IN ('ACTIVE', 'PAST_DUE', 'CANCELED')", name=op.f("ck_subscription_status")
        ),
        sa.CheckConstraint("credit_balance >= 0", name=op.f("ck_subscription_credit_non_negative")),
        sa.CheckConstraint(
            "current_period_end > current_period_start", name=op.f("ck_subscription_period_order")
        ),
        sa.CheckConstraint(
            "period_index >= 0", name=op.f("ck_subscription_period_index_non_negative")
        ),
        sa.ForeignKeyConstraint(
            ["plan_id"], ["plan.id"], name=op.f("fk_subscription_plan_id_plan")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_subscription")),
    )
    op.create_index(
        "idx_sub_due",
        "subscription",
        ["current_period_end"],
        unique=False,
        postgresql_where=sa.text("status = 'ACTIVE'"),
    )
    op.create_index("ix_subscription_customer_id", "subscription", ["customer_id"], unique=False)
    op.create_table(
        "invoice",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("subscription_id", sa.BigInteger(), nullable=False),
        sa.Column("customer_id", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("period_index", sa.Integer(), nullable=False),
        sa.Column("period_start", postgresql.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("period_end", postgresql.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("subtotal", sa.BigInteger(), nullable=False),
        sa.Column("credit_applied", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("attempt_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("next_attempt_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("leased_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("paid_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("closed_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
        sa.Column(
            "created_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint("currency ~ '^[A-Z]{3}$'", name=op.f("ck_invoice_currency_iso4217")),
        sa.CheckConstraint("kind IN ('RENEWAL', 'PRORATION')", name=op.f("ck_invoice_kind")),
        sa.CheckConstraint(
            "status IN ('OPEN', 'PAID', 'FAILED', 'VOID')", name=op.f("ck_invoice_status")
        ),
        sa.CheckConstraint(
            "amount >= 0 AND amount = subtotal - credit_applied", name=op.f("ck_invoice_amount")
        ),
        sa.CheckConstraint(
            "attempt_count >= 0", name=op.f("ck_invoice_attempt_count_non_negative")
        ),
        sa.CheckConstraint("credit_applied >= 0", name=op.f("ck_invoice_credit_non_negative")),
        sa.CheckConstraint("period_end > period_start", name=op.f("ck_invoice_period_order")),
        sa.CheckConstraint("subtotal >= 0", name=op.f("ck_invoice_subtotal_non_negative")),
        sa.ForeignKeyConstraint(
            ["subscription_id"],
            ["subscription.id"],
            name=op.f("fk_invoice_subscription_id_subscription"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_invoice")),
    )
    op.create_index(
        "idx_inv_retry",
        "invoice",
        ["next_attempt_at"],
        unique=False,
        postgresql_where=sa.text("status = 'OPEN'"),
    )
    op.create_index(
        "ix_invoice_subscription_id_id", "invoice", ["subscription_id", "id"], unique=False
    )
    op.create_index(
        "uq_invoice_renewal_period",
        "invoice",
        ["subscription_id", "period_start"],
        unique=True,
        postgresql_where=sa.text("kind = 'RENEWAL'"),
    )
    op.create_table(
        "credit_entry",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("subscription_id", sa.BigInteger(), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("reason", sa.String(length=20), nullable=False),
        sa.Column("invoice_id", sa.BigInteger(), nullable=True),
        sa.Column(
            "created_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "reason IN ('DOWNGRADE', 'INVOICE', 'VOID_REFUND', 'ADJUSTMENT')",
            name=op.f("ck_credit_entry_reason"),
        ),
        sa.CheckConstraint("amount <> 0", name=op.f("ck_credit_entry_amount_non_zero")),
        sa.ForeignKeyConstraint(
            ["invoice_id"], ["invoice.id"], name=op.f("fk_credit_entry_invoice_id_invoice")
        ),
        sa.ForeignKeyConstraint(
            ["subscription_id"],
            ["subscription.id"],
            name=op.f("fk_credit_entry_subscription_id_subscription"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_credit_entry")),
    )
    op.create_index(
        "ix_credit_entry_subscription_id", "credit_entry", ["subscription_id"], unique=False
    )
    op.create_table(
        "payment_attempt",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("invoice_id", sa.BigInteger(), nullable=False),
        sa.Column("attempt_number", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=100), nullable=False),
        sa.Column("source", sa.String(length=20), nullable=False),
        sa.Column("outcome", sa.String(length=20), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("decline_code", sa.Text(), nullable=True),
        sa.Column("gateway_reference", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("requested_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
        sa.Column(
            "recorded_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "outcome IN ('SUCCESS', 'DECLINED', 'UNKNOWN')", name=op.f("ck_payment_attempt_outcome")
        ),
        sa.CheckConstraint(
            "source IN ('COLLECTOR', 'WEBHOOK')", name=op.f("ck_payment_attempt_source")
        ),
        sa.ForeignKeyConstraint(
            ["invoice_id"], ["invoice.id"], name=op.f("fk_payment_attempt_invoice_id_invoice")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_payment_attempt")),
    )
    op.create_index(
        "ix_payment_attempt_idempotency_key", "payment_attempt", ["idempotency_key"], unique=False
    )
    op.create_index(
        "ix_payment_attempt_invoice_id", "payment_attempt", ["invoice_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_payment_attempt_invoice_id", table_name="payment_attempt")
    op.drop_index("ix_payment_attempt_idempotency_key", table_name="payment_attempt")
    op.drop_table("payment_attempt")
    op.drop_index("ix_credit_entry_subscription_id", table_name="credit_entry")
    op.drop_table("credit_entry")
    op.drop_index(
        "uq_invoice_renewal_period",
        table_name="invoice",
        postgresql_where=sa.text("kind = 'RENEWAL'"),
    )
    op.drop_index("ix_invoice_subscription_id_id", table_name="invoice")
    op.drop_index(
        "idx_inv_retry", table_name="invoice", postgresql_where=sa.text("status = 'OPEN'")
    )
    op.drop_table("invoice")
    op.drop_index("ix_subscription_customer_id", table_name="subscription")
    op.drop_index(
        "idx_sub_due", table_name="subscription", postgresql_where=sa.text("status = 'ACTIVE'")
    )
    op.drop_table("subscription")
    op.drop_index("ix_idempotency_key_expires_at", table_name="idempotency_key")
    op.drop_table("idempotency_key")
    op.drop_table("webhook_event")
    op.drop_table("processed_event")
    op.drop_table("plan")
    op.drop_index("ix_outbox_event_published_at", table_name="outbox_event")
    op.drop_index(
        "idx_outbox_unpublished",
        table_name="outbox_event",
        postgresql_where=sa.text("published_at IS NULL AND parked_at IS NULL"),
    )
    op.drop_table("outbox_event")
    op.drop_table("api_client")
