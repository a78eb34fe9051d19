"""Customers and the listings by customer, status and id, through the ASGI app."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.api.conftest import asgi_client
from tests.integration.api.helpers import assert_problem, scalar, subscribe


async def create_customer(client: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    body = {"externalId": f"crm-{uuid.uuid4().hex[:8]}", **fields}
    response = await client.post("/customers", json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def test_create_and_read_a_customer(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/customers",
        json={
            "externalId": "crm-0042",
            "email": "ada@example.com",
            "name": "Ada Lovelace",
            "timeZone": "Europe/London",
            "currency": "GBP",
        },
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert response.headers["location"] == f"/customers/{body['id']}"
    assert {k: body[k] for k in ("externalId", "email", "name", "timeZone", "currency")} == {
        "externalId": "crm-0042",
        "email": "ada@example.com",
        "name": "Ada Lovelace",
        "timeZone": "Europe/London",
        "currency": "GBP",
    }
    read = await client.get(f"/customers/{body['id']}")
    assert read.status_code == 200
    assert read.json() == body
    assert_problem(await client.get(f"/customers/{body['id'] + 1000}"), 404, "customer-not-found")


async def test_defaults_are_utc_and_no_currency(client: httpx.AsyncClient) -> None:
    body = await create_customer(client)
    assert (body["timeZone"], body["currency"], body["email"], body["name"]) == (
        "UTC",
        None,
        None,
        None,
    )


async def test_a_taken_external_id_is_409_naming_the_customer_and_writes_nothing(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    first = await create_customer(client, externalId="crm-1")
    again = await client.post("/customers", json={"externalId": "crm-1", "name": "Other"})
    problem = assert_problem(again, 409, "customer-exists")
    assert problem["customerId"] == first["id"]
    assert await scalar(engine, "SELECT count(*) FROM customer") == 1


async def test_bad_input_is_422_and_writes_nothing(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    for body in (
        {},
        {"externalId": ""},
        {"externalId": " padded "},
        {"externalId": "nul\x00inside"},
        {"externalId": "a", "name": "line\nbreak"},
        {"externalId": "x" * 256},
        {"externalId": "a", "email": "not-an-address"},
        {"externalId": "a", "timeZone": "Mars/Olympus"},
        {"externalId": "a", "currency": "eur"},
        {"externalId": "a", "unknown": 1},
    ):
        problem = assert_problem(
            await client.post("/customers", json=body), 422, "validation-error"
        )
        assert problem["errors"], body
    assert await scalar(engine, "SELECT count(*) FROM customer") == 0


async def test_the_same_idempotency_key_replays_the_creation(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    headers = {"Idempotency-Key": str(uuid.uuid4())}
    first = await client.post("/customers", json={"externalId": "k-1"}, headers=headers)
    second = await client.post("/customers", json={"externalId": "k-1"}, headers=headers)
    assert (first.status_code, second.status_code) == (201, 201)
    assert first.json() == second.json()
    assert await scalar(engine, "SELECT count(*) FROM customer") == 1


async def test_customers_page_newest_first_and_find_by_external_id(
    client: httpx.AsyncClient,
) -> None:
    made = [await create_customer(client, externalId=f"page-{i}") for i in range(5)]
    seen: list[int] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = (await client.get("/customers", params=params)).json()
        assert len(page["items"]) <= 2
        seen += [c["id"] for c in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == [c["id"] for c in reversed(made)]

    found = (await client.get("/customers", params={"externalId": "page-3"})).json()
    assert [c["id"] for c in found["items"]] == [made[3]["id"]]
    assert found["nextCursor"] is None
    missing = (await client.get("/customers", params={"externalId": "nobody"})).json()
    assert missing == {"items": [], "nextCursor": None}
    assert_problem(
        await client.get("/customers", params={"externalId": "a\x00b"}), 422, "validation-error"
    )


async def test_a_customers_subscriptions_page_newest_first(client: httpx.AsyncClient) -> None:
    ada, bob = await create_customer(client), await create_customer(client)
    adas = [(await subscribe(client, customer=ada["id"]))["id"] for _ in range(3)]
    await subscribe(client, customer=bob["id"])

    first = (await client.get(f"/customers/{ada['id']}/subscriptions?limit=2")).json()
    assert [s["id"] for s in first["items"]] == [adas[2], adas[1]]
    assert all(s["customerId"] == ada["id"] for s in first["items"])
    rest = (
        await client.get(
            f"/customers/{ada['id']}/subscriptions", params={"cursor": first["nextCursor"]}
        )
    ).json()
    assert [s["id"] for s in rest["items"]] == [adas[0]]
    assert rest["nextCursor"] is None
    assert_problem(
        await client.get(f"/customers/{bob['id'] + 1000}/subscriptions"),
        404,
        "customer-not-found",
    )


async def test_subscriptions_filtered_by_customer_and_status(client: httpx.AsyncClient) -> None:
    ada, bob = await create_customer(client), await create_customer(client)
    kept = (await subscribe(client, customer=ada["id"]))["id"]
    canceled = (await subscribe(client, customer=ada["id"]))["id"]
    other = (await subscribe(client, customer=bob["id"]))["id"]
    response = await client.post(f"/subscriptions/{canceled}/cancel", json={"atPeriodEnd": False})
    assert response.status_code == 200, response.text

    async def ids(**params: Any) -> list[int]:
        response = await client.get("/subscriptions", params=params)
        assert response.status_code == 200, response.text
        return [s["id"] for s in response.json()["items"]]

    assert await ids() == [other, canceled, kept]
    assert await ids(customerId=ada["id"]) == [canceled, kept]
    assert await ids(customerId=ada["id"], status="ACTIVE") == [kept]
    assert await ids(status="CANCELED") == [canceled]
    assert await ids(customerId=bob["id"] + 1000) == []
    assert_problem(
        await client.get("/subscriptions?status=PAUSED_FOREVER"), 422, "validation-error"
    )


async def test_subscription_cursor_pages_cover_everything_once(client: httpx.AsyncClient) -> None:
    customer = await create_customer(client)
    made = [(await subscribe(client, customer=customer["id"]))["id"] for _ in range(5)]
    seen: list[int] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"customerId": customer["id"], "limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = (await client.get("/subscriptions", params=params)).json()
        seen += [s["id"] for s in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == list(reversed(made))


async def test_a_cursor_of_another_listing_or_garbage_is_400(client: httpx.AsyncClient) -> None:
    customer = await create_customer(client)
    await create_customer(client)
    customer_cursor = (await client.get("/customers?limit=1")).json()["nextCursor"]
    assert customer_cursor is not None
    assert_problem(
        await client.get("/subscriptions", params={"cursor": customer_cursor}),
        400,
        "invalid-cursor",
    )
    assert_problem(
        await client.get(f"/customers/{customer['id']}/subscriptions?cursor=%%%"),
        400,
        "invalid-cursor",
    )


async def test_get_an_invoice_by_id(client: httpx.AsyncClient) -> None:
    customer = await create_customer(client)
    sub = await subscribe(client, customer=customer["id"])
    listed = (await client.get(f"/subscriptions/{sub['id']}/invoices")).json()["items"]
    (first,) = listed
    response = await client.get(f"/invoices/{first['id']}")
    assert response.status_code == 200, response.text
    assert response.json() == first
    assert_problem(await client.get(f"/invoices/{first['id'] + 1000}"), 404, "invoice-not-found")
    assert_problem(await client.get("/invoices/0"), 422, "validation-error")


async def test_listings_need_an_api_key(app: FastAPI) -> None:
    async with asgi_client(app, None) as anonymous:
        for path in ("/customers", "/customers/1", "/subscriptions", "/invoices/1"):
            assert_problem(await anonymous.get(path), 401, "unauthorized")
        assert_problem(
            await anonymous.post("/customers", json={"externalId": "a"}), 401, "unauthorized"
        )
