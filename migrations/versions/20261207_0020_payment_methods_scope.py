"""API keys: the payment_methods:write scope

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07

``PUT /customers/{id}/payment-method`` needs a scope of its own, ``payment_methods:write``: which
card charges a customer is not a subscription change. Until now the route needed
``subscriptions:write``, so every key holding that scope is given the new one too: the
integrations that set payment methods keep working, and a key that should not can be rotated
into one without it. Keys created from here on get it only when asked.

Downgrade takes the scope away from every key, then restores the previous list of known scopes.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BEFORE = ("plans:read", "subscriptions:read", "subscriptions:write", "invoices:read", "admin")
_NEW = "payment_methods:write"
_CHECK = "ck_api_client_scopes_known"


def _known(scopes: Sequence[str]) -> str:
    return "scopes <@ ARRAY[" + ", ".join(f"'{s}'" for s in scopes) + "]::text[]"


def upgrade() -> None:
    op.drop_constraint(op.f(_CHECK), "api_client", type_="check")
    op.create_check_constraint(op.f(_CHECK), "api_client", _known((*_BEFORE, _NEW)))
    op.execute(
        f"""
        UPDATE api_client SET scopes = array_append(scopes, '{_NEW}')
        WHERE 'subscriptions:write' = ANY(scopes) AND NOT '{_NEW}' = ANY(scopes)
        """
    )


def downgrade() -> None:
    op.execute(f"UPDATE api_client SET scopes = array_remove(scopes, '{_NEW}')")
    op.drop_constraint(op.f(_CHECK), "api_client", type_="check")
    op.create_check_constraint(op.f(_CHECK), "api_client", _known(_BEFORE))
