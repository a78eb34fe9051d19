"""The ``notifier_recipient`` table: the customer of each subscription, as the notifier learned
it from the subscription's SubscriptionCreated event."""

from __future__ import annotations

from billing_core.db import pg
from billing_core.db.pg import Connection, Statement

_REMEMBER = Statement(
    """
    INSERT INTO notifier_recipient (subscription_id, customer_id)
    VALUES (:subscription_id, :customer_id)
    ON CONFLICT (subscription_id) DO NOTHING
    """
)
_CUSTOMER_OF = Statement(
    "SELECT customer_id FROM notifier_recipient WHERE subscription_id = :subscription_id"
)


async def remember(conn: Connection, subscription_id: int, customer_id: int) -> None:
    """Record the subscription's customer (a subscription never changes customer)."""
    await pg.execute(
        conn, _REMEMBER, {"subscription_id": subscription_id, "customer_id": customer_id}
    )


async def customer_of(conn: Connection, subscription_id: int) -> int | None:
    """The subscription's customer, or None when its SubscriptionCreated was never seen."""
    value = await pg.fetchval(conn, _CUSTOMER_OF, {"subscription_id": subscription_id})
    return None if value is None else int(value)
