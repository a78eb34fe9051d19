"""moved billing anchors: subscription.anchor_period_index

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05

A plan change to another billing interval (monthly <-> yearly) starts a new period at the
change: the billing anchor moves there, and the periods after it are counted from the new
anchor. ``anchor_period_index`` is the index of the period that starts at ``billing_anchor``
(0 until an anchor moves), so period ``n`` is ``[boundary(anchor, n - anchor_period_index),
boundary(anchor, n - anchor_period_index + 1))`` while period indexes keep counting up (one
renewal invoice per index, never reused). Existing rows keep 0: their periods are unchanged.

Downgrade refuses while a subscription's anchor has moved (the schema before this revision
cannot say which period starts at the anchor, so its renewals would be computed wrong).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "subscription",
        sa.Column("anchor_period_index", sa.Integer(), server_default=sa.text("0"), nullable=False),
    )
    op.create_check_constraint(
        op.f("ck_subscription_anchor_period_index"),
        "subscription",
        "anchor_period_index >= 0 AND anchor_period_index <= period_index",
    )


def downgrade() -> None:
    moved = (
        op.get_bind()
        .execute(sa.text("SELECT count(*) FROM subscription WHERE anchor_period_index <> 0"))
        .scalar_one()
    )
    if moved:
        raise RuntimeError(
            f"{moved} subscriptions have a moved billing anchor (anchor_period_index <> 0): "
            "the schema before 0018 cannot renew them"
        )
    op.drop_constraint(op.f("ck_subscription_anchor_period_index"), "subscription", type_="check")
    op.drop_column("subscription", "anchor_period_index")
