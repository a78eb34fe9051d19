"""SQL of taxes: the rate that applies to each of a batch's subscriptions (one statement), and
setting a subscription's tax location. Nothing here commits."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from billing_core.db import pg
from billing_core.db.arrays import int_array
from billing_core.db.pg import Connection, Statement
from billing_core.domain.tax import TaxLocation, TaxRate

_RATES = Statement(
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

_SET_LOCATION = Statement(
    """
    INSERT INTO subscription_tax_location (subscription_id, country, region, updated_at)
    VALUES (:id, :country, :region, :now)
    ON CONFLICT (subscription_id) DO UPDATE
    SET country = excluded.country, region = excluded.region, updated_at = excluded.updated_at
    """
)


_RATE_COLUMNS = ("country", "region", "rate_ppm", "inclusive", "name")


async def rates_for(conn: Connection, subscription_ids: Sequence[int]) -> dict[int, TaxRate]:
    """The rate each subscription's invoices are taxed at (its region's, else its country's);
    a subscription without a location or without a rate is absent."""
    if not subscription_ids:
        return {}
    rows = await pg.fetch(conn, _RATES, {"ids": int_array(subscription_ids)})
    rates: dict[tuple[Any, ...], TaxRate] = {}  # a batch has thousands of rows, few rates
    found: dict[int, TaxRate] = {}
    for row in rows:
        columns = tuple(row[c] for c in _RATE_COLUMNS)
        rate = rates.get(columns)
        if rate is None:
            country, region, rate_ppm, inclusive, name = columns
            rate = TaxRate(country, region or None, int(rate_ppm), bool(inclusive), name)
            rates[columns] = rate
        found[int(row["subscription_id"])] = rate
    return found


async def set_location(
    conn: Connection, subscription_id: int, location: TaxLocation, *, now: datetime
) -> None:
    await pg.execute(
        conn,
        _SET_LOCATION,
        {
            "id": subscription_id,
            "country": location.country,
            "region": location.region or "",
            "now": now,
        },
    )
