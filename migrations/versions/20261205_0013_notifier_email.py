"""notifier_email: the e-mails the notifier has to send, and whether it has sent them

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05

The notifier writes one row per e-mail (at most one per event: the unique event id) in the same
transaction that records the event as processed, with the whole message as it will be sent
(headers, body, PDF attachment, a Message-ID of its own). It then sends the rows over SMTP and
marks each one sent. A restart re-reads the events but finds their rows: it sends only what was
not marked sent.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TZ = postgresql.TIMESTAMP(timezone=True)


def upgrade() -> None:
    op.create_table(
        "notifier_email",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("event_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("event_type", sa.String(length=50), nullable=False),
        sa.Column("subscription_id", sa.BigInteger(), nullable=False),
        sa.Column("customer_id", sa.BigInteger(), nullable=False),
        sa.Column("recipient", sa.String(length=320), nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("message", sa.LargeBinary(), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("next_attempt_at", TZ, nullable=False),
        sa.Column("attempt_started_at", TZ, nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("sent_at", TZ, nullable=True),
        sa.Column("failed_at", TZ, nullable=True),
        sa.Column("created_at", TZ, server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("attempts >= 0", name=op.f("ck_notifier_email_attempts_non_negative")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notifier_email")),
        sa.UniqueConstraint("event_id", name=op.f("uq_notifier_email_event_id")),
        sa.UniqueConstraint("message_id", name=op.f("uq_notifier_email_message_id")),
    )
    op.create_index(
        "idx_notifier_email_due",
        "notifier_email",
        ["next_attempt_at"],
        unique=False,
        postgresql_where=sa.text("sent_at IS NULL AND failed_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index(
        "idx_notifier_email_due",
        table_name="notifier_email",
        postgresql_where=sa.text("sent_at IS NULL AND failed_at IS NULL"),
    )
    op.drop_table("notifier_email")
