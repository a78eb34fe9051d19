"""SQL of taxes: the rate that applies to each of a batch's subscriptions (one statement), and
setting a subscription's tax location. Nothing here commits."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from billing_core.db.arrays import int_array
from billing_core.domain.tax import TaxLocation, TaxRate

Db = AsyncSession | AsyncConnection

_RATES = text(
    """
    SELECT l.subscription_id, l.country AS location_country, l.region AS location_region,
           r.country, r.region, r.rate_ppm, r.inclusive, r.name
    FROM subscription_tax_location l
    JOIN LATERAL (
        SELECT * FROM tax_rate t
        WHERE t.country = l.country AND t.region IN (l.region, '')
        ORDER BY t.region DESC LIMIT 1
    ) r ON true
    WHERE l.subscription_id = ANY(CAST(:ids AS text)::bigint[])
    """
)

_SET_LOCATION = text(
    """
    INSERT INTO subscription_tax_location (subscription_id, country, region, updated_at)
    VALUES (:id, :country, :region, :now)
    ON CONFLICT (subscription_id) DO UPDATE
    SET country = excluded.country, region = excluded.region, updated_at = excluded.updated_at
    """
)


async def rates_for(db: Db, subscription_ids: Sequence[int]) -> dict[int, TaxRate]:
    """The rate each subscription's invoices are taxed at (its region's, else its country's);
    a subscription without a location or without a rate is absent."""
    if not subscription_ids:
        return {}
    rows = await db.execute(_RATES, {"ids": int_array(subscription_ids)})
    rates: dict[tuple[Any, ...], TaxRate] = {}  # a batch has thousands of rows, few rates
    found: dict[int, TaxRate] = {}
    for subscription_id, _, _, *columns in rows:
        rate = rates.get(tuple(columns))
        if rate is None:
            country, region, rate_ppm, inclusive, name = columns
            rate = TaxRate(country, region or None, int(rate_ppm), bool(inclusive), name)
            rates[tuple(columns)] = rate
        found[int(subscription_id)] = rate
    return found


async def set_location(
    db: Db, subscription_id: int, location: TaxLocation, *, now: datetime
) -> None:
    await db.execute(
        _SET_LOCATION,
        {
            "id": subscription_id,
            "country": location.country,
            "region": location.region or "",
            "now": now,
        },
    )
