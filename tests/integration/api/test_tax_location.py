"""PUT /subscriptions/{id}/tax-location: where the subscription's invoices are taxed."""

from __future__ import annotations

import uuid
from datetime import timedelta

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.db import pg
from billing_core.domain.tax import round_div
from tests.integration.api.helpers import assert_problem, rows, subscribe


async def seed_rates(pool: pg.Pool) -> None:
    async with pg.transaction(pool) as conn:
        await conn.execute(
            "INSERT INTO tax_rate (country, region, rate_ppm, inclusive, name) VALUES "
            "('FR', '', 200000, true, 'VAT'), ('US', 'NY', 88750, false, 'Sales tax')"
        )


async def test_the_location_is_stored_and_answers_its_rate(
    client: httpx.AsyncClient, engine: AsyncEngine, pool: pg.Pool
) -> None:
    await seed_rates(pool)
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
    # Each of the three writes is in the audit trail, with the rate it found.
    audited = await rows(
        engine,
        "SELECT action, subject_type, subject_id, detail, client_id FROM audit_event "
        "WHERE action = 'subscription.set_tax_location' ORDER BY id",
    )
    assert [(a["subject_type"], a["subject_id"]) for a in audited] == [
        ("subscription", sub["id"])
    ] * 3
    assert [a["detail"] for a in audited] == [
        {"country": "US", "region": "NY", "taxRate": "Sales tax 8.875% (US-NY)"},
        {"country": "FR", "region": None, "taxRate": "VAT 20% (FR)"},
        {"country": "DE", "region": None, "taxRate": None},
    ]
    assert all(a["client_id"] is not None for a in audited)


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
    assert await rows(engine, "SELECT * FROM audit_event WHERE action LIKE '%tax%'") == []


async def test_a_plan_change_invoice_is_taxed_at_the_subscriptions_rate(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock, pool: pg.Pool
) -> None:
    await seed_rates(pool)
    on_top = await subscribe(client, plan="BASIC_MONTHLY")
    inside = await subscribe(client, plan="BASIC_MONTHLY")
    for sub, body in ((on_top, {"country": "US", "region": "NY"}), (inside, {"country": "FR"})):
        r = await client.put(f"/subscriptions/{sub['id']}/tax-location", json=body)
        assert r.status_code == 200, r.text
    clock.advance(timedelta(days=10))
    invoices = {}
    for sub in (on_top, inside):
        r = await client.post(
            f"/subscriptions/{sub['id']}/change-plan",
            json={"planCode": "PRO_MONTHLY"},
            headers={"Idempotency-Key": str(uuid.uuid4())},
        )
        assert r.status_code == 200, r.text
        due = r.json()["due"]
        items = (await client.get(f"/subscriptions/{sub['id']}/invoices")).json()["items"]
        invoices[sub["id"]] = (due, items[0])

    due, invoice = invoices[on_top["id"]]
    kinds = [line["kind"] for line in invoice["lines"]]
    assert kinds == ["PRORATION_CHARGE", "PRORATION_CREDIT", "TAX"]
    charge, unused, tax = (line["amount"] for line in invoice["lines"])
    assert tax == round_div(charge * 88750, 1_000_000) + round_div(unused * 88750, 1_000_000)
    assert (invoice["subtotal"], invoice["amount"]) == (due + tax, due + tax)
    assert invoice["lines"][2]["taxInclusive"] is False

    due, invoice = invoices[inside["id"]]
    assert [line["kind"] for line in invoice["lines"]] == [
        "PRORATION_CHARGE",
        "PRORATION_CREDIT",
        "TAX",
    ]
    assert (invoice["subtotal"], invoice["amount"]) == (due, due)  # the tax is inside
    assert invoice["lines"][2]["taxInclusive"] is True
    created = await rows(
        engine,
        "SELECT payload FROM outbox_event WHERE aggregate_id = :s "
        "AND event_type = 'InvoiceCreated' ORDER BY sequence DESC LIMIT 1",
        s=inside["id"],
    )
    assert created[0]["payload"]["tax"] == invoice["lines"][2]["amount"] > 0


async def test_a_location_change_is_a_versioned_write_with_its_versions_audited(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    sub = await subscribe(client)
    path = f"/subscriptions/{sub['id']}/tax-location"
    for country in ("FR", "DE"):
        assert (await client.put(path, json={"country": country})).status_code == 200
    (version,) = await rows(engine, "SELECT version FROM subscription")
    assert version["version"] == sub["version"] + 2
    audited = await rows(
        engine,
        "SELECT version_before, version_after FROM audit_event "
        "WHERE action = 'subscription.set_tax_location' ORDER BY id",
    )
    start = sub["version"]
    assert [(a["version_before"], a["version_after"]) for a in audited] == [
        (start, start + 1),
        (start + 1, start + 2),
    ]
