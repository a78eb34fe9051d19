"""Our successful charges, found by the gateway's reference (a Stripe PaymentIntent id): what a
refund or dispute event at the gateway is about."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from billing_core.db.arrays import text_array
from billing_core.db.pg import Connection, Statement, fetch


@dataclass(frozen=True)
class KnownCharge:
    gateway_reference: str
    payment_attempt_id: int
    invoice_id: int
    subscription_id: int
    idempotency_key: str
    refund_requested: bool  # we asked for this charge's money back ourselves


_FIND = Statement(
    """
    SELECT DISTINCT ON (pa.gateway_reference)
           pa.gateway_reference, pa.id AS payment_attempt_id, pa.invoice_id,
           i.subscription_id, pa.idempotency_key,
           EXISTS (SELECT 1 FROM refund r
                   WHERE r.charge_reference = pa.gateway_reference) AS refund_requested
    FROM payment_attempt pa
    JOIN invoice i ON i.id = pa.invoice_id
    WHERE pa.gateway_reference = ANY(CAST(:references AS text)::text[])
      AND pa.outcome = 'SUCCESS'
    ORDER BY pa.gateway_reference, pa.id
    """
)


async def find_charges(conn: Connection, references: Sequence[str]) -> dict[str, KnownCharge]:
    if not references:
        return {}
    rows = await fetch(conn, _FIND, {"references": text_array(references)})
    return {row["gateway_reference"]: KnownCharge(**row) for row in rows}
