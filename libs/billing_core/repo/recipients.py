"""The ``notifier_recipient`` table: the customer of each subscription, as the notifier learned
it from the subscription's SubscriptionCreated event."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

_REMEMBER = text(
    """
    INSERT INTO notifier_recipient (subscription_id, customer_id)
    VALUES (:subscription_id, :customer_id)
    ON CONFLICT (subscription_id) DO NOTHING
    """
)
_CUSTOMER_OF = text(
    "SELECT customer_id FROM notifier_recipient WHERE subscription_id = :subscription_id"
)


async def remember(
    db: AsyncSession | AsyncConnection, subscription_id: int, customer_id: int
) -> None:
    """Record the subscription's customer (a subscription never changes customer)."""
    await db.execute(_REMEMBER, {"subscription_id": subscription_id, "customer_id": customer_id})


async def customer_of(db: AsyncSession | AsyncConnection, subscription_id: int) -> int | None:
    """The subscription's customer, or None when its SubscriptionCreated was never seen."""
    found = await db.execute(_CUSTOMER_OF, {"subscription_id": subscription_id})
    value = found.scalar_one_or_none()
    return None if value is None else int(value)
