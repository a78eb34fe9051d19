"""SQL of the reconciliation items: what needs a person, and who settled it. Nothing here commits.

An item is written in the transaction that finds the problem (a success that does not match its
invoice, an attempt held after uncertain or refused answers, a refund the gateway refused);
resolving one stamps who, when and how, and never deletes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from billing_core.db.arrays import int_array, nullable_int_array, text_array
from billing_core.db.pg import Connection, Statement, execute, fetch, fetchrow


@dataclass(frozen=True)
class NewItem:
    invoice_id: int
    subscription_id: int
    reason: str  # ``<kind>: <details, with the gateway's words>`` or just ``<kind>``
    idempotency_key: str | None = None
    gateway_reference: str | None = None
    payment_attempt_id: int | None = None
    refund_id: int | None = None

    @property
    def kind(self) -> str:
        return kind_of(self.reason)


def kind_of(reason: str) -> str:
    """``report_mismatch``, ``gateway_rejected``, ``unknown_unresolved``, ``refund_failed``..."""
    return reason.split(":", 1)[0].strip()[:40]


# What each kind of item means, as the CLI and the console say it.
MEANINGS = {
    "unknown_unresolved": "held: the gateway's answers stayed uncertain",
    "gateway_rejected": "held: the gateway refused the call for good",
    "report_mismatch": "a success that does not match its invoice (not applied)",
    "refund_failed": "a refund the gateway refused",
    "charged_settled_invoice": "money taken for a closed invoice (before refunds existed)",
}


@dataclass(frozen=True)
class Item:
    id: int
    invoice_id: int
    subscription_id: int
    kind: str
    reason: str
    idempotency_key: str | None
    gateway_reference: str | None
    payment_attempt_id: int | None
    refund_id: int | None
    invoice_status: str
    amount: int | None  # what the gateway reported (the attempt's), or the refund's
    currency: str | None
    gateway_said: str | None  # the attempt's or the refund's error, as the gateway put it
    created_at: datetime
    resolved_at: datetime | None
    resolved_by: str | None
    resolution: str | None


_ADD = Statement(
    """
    INSERT INTO reconciliation_item (invoice_id, subscription_id, kind, reason, idempotency_key,
                                     gateway_reference, payment_attempt_id, refund_id, created_at)
    SELECT *, CAST(:now AS timestamptz) FROM unnest(
        CAST(:invoice_ids AS text)::bigint[], CAST(:subscription_ids AS text)::bigint[],
        CAST(:kinds AS text)::text[], CAST(:reasons AS text)::text[], CAST(:keys AS text)::text[],
        CAST(:references AS text)::text[], CAST(:attempt_ids AS text)::bigint[],
        CAST(:refund_ids AS text)::bigint[]
    )
    """
)


async def add_items(conn: Connection, items: Sequence[NewItem], *, now: datetime) -> None:
    if not items:
        return
    await execute(
        conn,
        _ADD,
        {
            "invoice_ids": int_array(i.invoice_id for i in items),
            "subscription_ids": int_array(i.subscription_id for i in items),
            "kinds": text_array([i.kind for i in items]),
            "reasons": text_array([i.reason for i in items]),
            "keys": text_array([i.idempotency_key for i in items]),
            "references": text_array([i.gateway_reference for i in items]),
            "attempt_ids": nullable_int_array(i.payment_attempt_id for i in items),
            "refund_ids": nullable_int_array(i.refund_id for i in items),
            "now": now,
        },
    )


_LIST = Statement(
    """
    SELECT r.id, r.invoice_id, r.subscription_id, r.kind, r.reason, r.idempotency_key,
           r.gateway_reference, r.payment_attempt_id, r.refund_id, i.status AS invoice_status,
           coalesce(f.amount, a.amount) AS amount, coalesce(f.currency, a.currency) AS currency,
           coalesce(f.error, a.error) AS gateway_said,
           r.created_at, r.resolved_at, r.resolved_by, r.resolution
    FROM reconciliation_item r
    JOIN invoice i ON i.id = r.invoice_id
    LEFT JOIN payment_attempt a ON a.id = r.payment_attempt_id
    LEFT JOIN refund f ON f.id = r.refund_id
    WHERE (CAST(:everything AS boolean) OR r.resolved_at IS NULL)
    ORDER BY r.id
    LIMIT :limit
    """
)


async def list_items(
    conn: Connection, *, include_resolved: bool = False, limit: int = 1000
) -> list[Item]:
    """The open items, oldest first (with ``include_resolved``, the settled ones too)."""
    rows = await fetch(conn, _LIST, {"everything": include_resolved, "limit": limit})
    return [Item(**row) for row in rows]


_RESOLVE = Statement(
    """
    UPDATE reconciliation_item
    SET resolved_at = :now, resolved_by = :who, resolution = :how
    WHERE id = :id AND resolved_at IS NULL
    RETURNING id
    """
)


async def resolve_item(
    conn: Connection, item_id: int, *, who: str, how: str, now: datetime
) -> bool:
    """Mark an open item settled, saying who and how; False when there is no such open item."""
    resolved = await fetchrow(conn, _RESOLVE, {"id": item_id, "who": who, "how": how, "now": now})
    return resolved is not None
