"""Settling what needs a person: an operator marks a reconciliation item resolved, from the CLI
or the console, with its ``audit_event`` row in the same transaction (the caller commits)."""

from __future__ import annotations

from datetime import datetime

from billing_core.db.pg import Connection
from billing_core.repo import audit
from billing_core.repo import reconciliation as reconciliation_repo


async def resolve_item(
    conn: Connection, item_id: int, *, actor: audit.Actor, who: str, how: str, now: datetime
) -> bool:
    """Mark an open item resolved (who, how, when) and audit it; False when no such open item
    exists (nothing written)."""
    if not await reconciliation_repo.resolve_item(conn, item_id, who=who, how=how, now=now):
        return False
    entry = audit.AuditEntry(
        actor,
        audit.RECONCILIATION_RESOLVE,
        audit.RECONCILIATION_ITEM,
        item_id,
        detail={"by": who, "note": how},
    )
    await audit.record(conn, entry, now=now)
    return True
