"""API keys: scopes, expiry, last use, per-client rate limit, rotation; the audit_event table

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-05

Keys created before scopes existed keep doing what they could do: they get every scope. The
column's default is only there to fill those rows; new keys always name their scopes.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The scopes as of this revision (a later scope needs its own migration).
_SCOPES = ("plans:read", "subscriptions:read", "subscriptions:write", "invoices:read", "admin")
_ARRAY = "ARRAY[" + ", ".join(f"'{s}'" for s in _SCOPES) + "]::text[]"


def upgrade() -> None:
    op.add_column(
        "api_client",
        sa.Column(
            "scopes", postgresql.ARRAY(sa.Text()), nullable=False, server_default=sa.text(_ARRAY)
        ),
    )
    op.alter_column("api_client", "scopes", server_default=None)
    op.add_column("api_client", sa.Column("expires_at", sa.TIMESTAMP(timezone=True)))
    op.add_column("api_client", sa.Column("last_used_at", sa.TIMESTAMP(timezone=True)))
    op.add_column("api_client", sa.Column("rate_limit_per_minute", sa.Integer()))
    op.add_column("api_client", sa.Column("rotated_from_id", sa.BigInteger()))
    op.create_foreign_key(
        op.f("fk_api_client_rotated_from_id_api_client"),
        "api_client",
        "api_client",
        ["rotated_from_id"],
        ["id"],
    )
    op.create_check_constraint(
        op.f("ck_api_client_scopes_known"), "api_client", f"scopes <@ {_ARRAY}"
    )
    op.create_check_constraint(
        op.f("ck_api_client_rate_limit_positive"), "api_client", "rate_limit_per_minute > 0"
    )
    op.create_table(
        "audit_event",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("occurred_at", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("source", sa.String(10), nullable=False),
        sa.Column("client_id", sa.BigInteger()),
        sa.Column("action", sa.String(50), nullable=False),
        sa.Column("subject_type", sa.String(30), nullable=False),
        sa.Column("subject_id", sa.BigInteger(), nullable=False),
        sa.Column("version_before", sa.BigInteger()),
        sa.Column("version_after", sa.BigInteger()),
        sa.Column("request_id", sa.Text()),
        sa.Column(
            "detail",
            postgresql.JSONB(astext_type=sa.Text()),
            nullable=False,
            server_default=sa.text("'{}'::jsonb"),
        ),
        sa.CheckConstraint("source IN ('API', 'CLI')", name=op.f("ck_audit_event_source")),
        sa.ForeignKeyConstraint(
            ["client_id"], ["api_client.id"], name=op.f("fk_audit_event_client_id_api_client")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_event")),
    )
    op.create_index("ix_audit_event_subject", "audit_event", ["subject_type", "subject_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_audit_event_subject", table_name="audit_event")
    op.drop_table("audit_event")
    op.drop_constraint(op.f("ck_api_client_rate_limit_positive"), "api_client", type_="check")
    op.drop_constraint(op.f("ck_api_client_scopes_known"), "api_client", type_="check")
    op.drop_constraint(
        op.f("fk_api_client_rotated_from_id_api_client"), "api_client", type_="foreignkey"
    )
    for column in (
        "rotated_from_id",
        "rate_limit_per_minute",
        "last_used_at",
        "expires_at",
        "scopes",
    ):
        op.drop_column("api_client", column)
