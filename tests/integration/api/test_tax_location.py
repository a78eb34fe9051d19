"""PUT /subscriptions/{id}/tax-location: where the subscription's invoices are taxed."""

from __future__ import annotations

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.api.helpers import assert_problem, rows, subscribe


async def test_the_location_is_stored_and_answers_its_rate(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO tax_rate (country, region, rate_ppm, inclusive, name) VALUES "
                "('FR', '', 200000, true, 'VAT'), ('US', 'NY', 88750, false, 'Sales tax')"
            )
        )
    sub = await subscribe(client)
    path = f"/subscriptions/{sub['id']}/tax-location"

    ny = await client.put(path, json={"country": "US", "region": "NY"})
    assert ny.status_code == 200, ny.text
    assert ny.json() == {
        "subscriptionId": sub["id"],
        "country": "US",
        "region": "NY",
        "taxRate": "Sales tax 8.875% (US-NY)",
        "taxInclusive": False,
    }
    france = (await client.put(path, json={"country": "FR"})).json()  # replaces it
    assert (france["taxRate"], france["taxInclusive"]) == ("VAT 20% (FR)", True)
    nowhere = (await client.put(path, json={"country": "DE"})).json()
    assert (nowhere["taxRate"], nowhere["taxInclusive"]) == (None, None)
    stored = await rows(
        engine, "SELECT subscription_id, country, region FROM subscription_tax_location"
    )
    assert [(r["subscription_id"], r["country"], r["region"]) for r in stored] == [
        (sub["id"], "DE", "")
    ]


async def test_bad_input_is_refused_and_changes_nothing(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    sub = await subscribe(client)
    path = f"/subscriptions/{sub['id']}/tax-location"
    for body in ({"country": "fr"}, {"country": "FRA"}, {"country": "US", "region": "n y"}, {}):
        assert_problem(await client.put(path, json=body), 422, "validation-error")
    assert_problem(
        await client.put("/subscriptions/999999/tax-location", json={"country": "FR"}),
        404,
        "subscription-not-found",
    )
    assert await rows(engine, "SELECT * FROM subscription_tax_location") == []
