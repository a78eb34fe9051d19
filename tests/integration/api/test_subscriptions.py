"""Every subscription endpoint against real PostgreSQL, through the ASGI app."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from tests.integration.api.helpers import assert_problem, new_customer, rows, scalar, subscribe


def key() -> dict[str, str]:
    return {"Idempotency-Key": str(uuid.uuid4())}


async def events_of(engine: AsyncEngine, subscription_id: int) -> list[str]:
    found = await rows(
        engine,
        "SELECT event_type FROM outbox_event WHERE aggregate_id = :s ORDER BY sequence",
        s=subscription_id,
    )
    return [r["event_type"] for r in found]


async def test_create_subscription_opens_first_period_and_invoice(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    customer = (await new_customer(client))["id"]
    response = await client.post(
        "/subscriptions",
        json={"customerId": customer, "planCode": "BASIC_MONTHLY", "timeZone": "Europe/Paris"},
        headers=key(),
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert response.headers["location"] == f"/subscriptions/{body['id']}"
    assert response.headers["etag"] == '"0"'
    assert body["status"] == "ACTIVE"
    assert body["customerId"] == customer
    assert body["plan"] == {
        "code": "BASIC_MONTHLY",
        "name": "Basic, monthly",
        "priceAmount": 990,
        "currency": "EUR",
        "interval": "MONTH",
    }
    assert body["periodIndex"] == 0
    assert body["version"] == 0
    assert body["creditBalance"] == 0
    assert body["cancelAtPeriodEnd"] is False
    # Anchored at now, 10:30 in Paris (CET); a month later it is 10:30 CEST = 08:30 UTC.
    assert body["currentPeriodStart"] == "2026-03-10T09:30:00Z"
    assert body["currentPeriodEnd"] == "2026-04-10T08:30:00Z"

    invoices = await rows(engine, "SELECT * FROM invoice WHERE subscription_id = :s", s=body["id"])
    assert len(invoices) == 1
    inv = invoices[0]
    assert (inv["kind"], inv["period_index"], inv["status"]) == ("RENEWAL", 0, "OPEN")
    assert (inv["amount"], inv["subtotal"], inv["currency"]) == (990, 990, "EUR")
    assert inv["next_attempt_at"] == clock.now()
    assert await events_of(engine, body["id"]) == ["SubscriptionCreated", "InvoiceCreated"]


async def test_created_response_is_what_was_stored(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    """The 201 body is built from the rows as inserted (no re-read): a later GET must give the
    same document, and the events are the subscription's first ones, numbered from 1."""
    created = await client.post(
        "/subscriptions",
        json={
            "customerId": (await new_customer(client))["id"],
            "planCode": "PRO_YEARLY",
            "timeZone": "America/New_York",
            "startAt": (clock.now() - timedelta(days=40)).isoformat(),
        },
        headers=key(),
    )
    assert created.status_code == 201, created.text
    sub_id = created.json()["id"]
    got = await client.get(f"/subscriptions/{sub_id}")
    assert got.status_code == 200
    assert got.content == created.content
    assert got.headers["etag"] == created.headers["etag"]
    found = await rows(
        engine,
        "SELECT sequence, event_type, payload, occurred_at FROM outbox_event "
        "WHERE aggregate_id = :s ORDER BY sequence",
        s=sub_id,
    )
    assert [(e["sequence"], e["event_type"]) for e in found] == [
        (1, "SubscriptionCreated"),
        (2, "InvoiceCreated"),
    ]
    assert all(e["occurred_at"] == clock.now() for e in found)
    invoice = (await rows(engine, "SELECT * FROM invoice WHERE subscription_id = :s", s=sub_id))[0]
    assert found[1]["payload"]["invoiceId"] == invoice["id"]
    assert found[0]["payload"]["currentPeriodStart"] == created.json()["currentPeriodStart"]
    assert invoice["updated_at"] == invoice["created_at"] == clock.now()
    assert invoice["period_start"] == clock.now() - timedelta(days=40)
    assert await scalar(engine, "SELECT event_seq FROM subscription WHERE id = :s", s=sub_id) == 2


async def test_create_requires_idempotency_key(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    response = await client.post(
        "/subscriptions", json={"customerId": 1, "planCode": "BASIC_MONTHLY"}
    )
    assert_problem(response, 400, "idempotency-key-required")
    assert await scalar(engine, "SELECT count(*) FROM subscription") == 0


async def test_create_rejects_bad_input(client: httpx.AsyncClient, engine: AsyncEngine) -> None:
    unknown_plan = await client.post(
        "/subscriptions", json={"customerId": 1, "planCode": "NOPE"}, headers=key()
    )
    assert_problem(unknown_plan, 422, "unknown-plan")

    too_big = await client.post(
        "/subscriptions",
        json={"customerId": 2**63, "planCode": "BASIC_MONTHLY"},
        headers=key(),
    )
    problem = assert_problem(too_big, 422, "validation-error")
    assert [e["field"] for e in problem["errors"]] == ["body.customerId"]

    bad_zone = await client.post(
        "/subscriptions",
        json={"customerId": 1, "planCode": "BASIC_MONTHLY", "timeZone": "Mars/Olympus"},
        headers=key(),
    )
    assert [e["field"] for e in assert_problem(bad_zone, 422, "validation-error")["errors"]] == [
        "body.timeZone"
    ]

    missing = await client.post("/subscriptions", json={}, headers=key())
    fields = {e["field"] for e in assert_problem(missing, 422, "validation-error")["errors"]}
    assert fields == {"body.customerId", "body.planCode"}

    malformed = await client.post(
        "/subscriptions",
        content=b'{"customerId": 1,',
        headers={**key(), "content-type": "application/json"},
    )
    assert_problem(malformed, 400, "malformed-json")

    future = await client.post(
        "/subscriptions",
        json={"customerId": 1, "planCode": "BASIC_MONTHLY", "startAt": "2030-01-01T00:00:00Z"},
        headers=key(),
    )
    assert_problem(future, 422, "business-rule-violated")
    assert await scalar(engine, "SELECT count(*) FROM subscription") == 0


async def test_an_unknown_customer_is_refused_and_nothing_is_written(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    """A customerId that is no customer is 422 unknown-customer (a field of the body, like an
    unknown plan), with and without a coupon; nothing is written, not even the key's response,
    so the same key then subscribes a customer that exists."""
    coupon = await client.post(
        "/coupons", json={"code": "TEN", "percentOff": 10, "duration": "FOREVER"}, headers=key()
    )
    assert coupon.status_code == 201, coupon.text
    same_key = key()
    plain = await client.post(
        "/subscriptions", json={"customerId": 404, "planCode": "BASIC_MONTHLY"}, headers=same_key
    )
    assert "customer 404" in assert_problem(plain, 422, "unknown-customer")["detail"]
    with_coupon = await client.post(
        "/subscriptions",
        json={"customerId": 404, "planCode": "BASIC_MONTHLY", "couponCode": "TEN"},
        headers=key(),
    )
    assert_problem(with_coupon, 422, "unknown-customer")
    for table in ("subscription", "invoice", "outbox_event"):
        assert await scalar(engine, f"SELECT count(*) FROM {table}") == 0, table
    assert (
        await scalar(engine, "SELECT count(*) FROM audit_event WHERE subject_type = 'subscription'")
        == 0
    )
    assert (
        await scalar(
            engine, "SELECT count(*) FROM idempotency_key WHERE request_path = '/subscriptions'"
        )
        == 0
    )
    assert await scalar(engine, "SELECT times_redeemed FROM coupon WHERE code = 'TEN'") == 0

    customer = (await new_customer(client))["id"]
    created = await client.post(
        "/subscriptions",
        json={"customerId": customer, "planCode": "BASIC_MONTHLY"},
        headers=same_key,
    )
    assert created.status_code == 201, created.text
    assert created.json()["customerId"] == customer


async def test_oversize_body_is_413(client: httpx.AsyncClient, api_key: str) -> None:
    big = b'{"customerId": 1, "planCode": "' + b"A" * 70_000 + b'"}'
    response = await client.post(
        "/subscriptions", content=big, headers={**key(), "content-type": "application/json"}
    )
    assert_problem(response, 413, "payload-too-large")

    async def chunks() -> object:
        for _ in range(70):
            yield b" " * 1024

    chunked = await client.post(
        "/subscriptions",
        content=chunks(),  # type: ignore[arg-type]
        headers={**key(), "content-type": "application/json"},
    )
    assert_problem(chunked, 413, "payload-too-large")


async def test_get_subscription_and_not_found(client: httpx.AsyncClient) -> None:
    created = await subscribe(client, plan="PRO_YEARLY")
    got = await client.get(f"/subscriptions/{created['id']}")
    assert got.status_code == 200
    assert got.json() == created
    assert got.headers["etag"] == '"0"'
    assert got.json()["currentPeriodEnd"] == "2027-03-10T09:30:00Z"

    assert_problem(await client.get("/subscriptions/999999"), 404, "subscription-not-found")
    assert_problem(await client.get(f"/subscriptions/{2**63}"), 422, "validation-error")
    assert_problem(await client.get("/subscriptions/0"), 422, "validation-error")
    assert_problem(await client.get("/subscriptions/abc"), 422, "validation-error")


async def test_list_plans(client: httpx.AsyncClient) -> None:
    response = await client.get("/plans")
    assert response.status_code == 200
    codes = [p["code"] for p in response.json()["items"]]
    assert "BASIC_MONTHLY" in codes
    assert "TEAM_MONTHLY_USD" in codes


async def test_cancel_immediately_voids_open_invoices(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    sub = await subscribe(client)
    response = await client.post(
        f"/subscriptions/{sub['id']}/cancel", json={"atPeriodEnd": False}, headers=key()
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "CANCELED"
    assert body["version"] == 1
    assert body["canceledAt"] == "2026-03-10T09:30:00Z"
    invoice = (await rows(engine, "SELECT * FROM invoice WHERE subscription_id = :s", s=sub["id"]))[
        0
    ]
    assert invoice["status"] == "VOID"
    assert invoice["next_attempt_at"] is None
    assert await events_of(engine, sub["id"]) == [
        "SubscriptionCreated",
        "InvoiceCreated",
        "InvoiceVoided",
        "SubscriptionCanceled",
    ]

    again = await client.post(
        f"/subscriptions/{sub['id']}/cancel", json={"atPeriodEnd": False}, headers=key()
    )
    assert again.status_code == 200
    assert again.json()["version"] == 1  # no-op: nothing written
    assert len(await events_of(engine, sub["id"])) == 4


async def test_cancel_during_a_gateway_call_only_requests_the_void(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    """The collector leased the invoice (its call may be at the gateway): the cancel is
    answered CANCELED, and the invoice shows its void requested until the call decides."""
    sub = await subscribe(client)
    async with engine.begin() as conn:
        from sqlalchemy import text  # noqa: PLC0415

        await conn.execute(
            text(
                "UPDATE invoice SET leased_at = :now, next_attempt_at = :lease "
                "WHERE subscription_id = :s"
            ),
            {"now": clock.now(), "lease": clock.now() + timedelta(minutes=2), "s": sub["id"]},
        )
    response = await client.post(
        f"/subscriptions/{sub['id']}/cancel", json={"atPeriodEnd": False}, headers=key()
    )
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "CANCELED"
    (invoice,) = (await client.get(f"/subscriptions/{sub['id']}/invoices")).json()["items"]
    assert (invoice["status"], invoice["voidRequestedAt"]) == ("OPEN", "2026-03-10T09:30:00Z")
    assert await events_of(engine, sub["id"]) == [
        "SubscriptionCreated",
        "InvoiceCreated",
        "SubscriptionCanceled",
    ]


async def test_cancel_at_period_end_sets_the_flag_only(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    sub = await subscribe(client)
    response = await client.post(
        f"/subscriptions/{sub['id']}/cancel", json={"atPeriodEnd": True}, headers=key()
    )
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["cancelAtPeriodEnd"], body["version"]) == ("ACTIVE", True, 1)
    status = await scalar(
        engine, "SELECT status FROM invoice WHERE subscription_id = :s", s=sub["id"]
    )
    assert status == "OPEN"

    missing = await client.post(
        "/subscriptions/424242/cancel", json={"atPeriodEnd": True}, headers=key()
    )
    assert_problem(missing, 404, "subscription-not-found")
    no_flag = await client.post(f"/subscriptions/{sub['id']}/cancel", json={}, headers=key())
    assert_problem(no_flag, 422, "validation-error")


async def test_upgrade_creates_proration_invoice(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    sub = await subscribe(client, plan="BASIC_MONTHLY")
    clock.advance(timedelta(days=10))  # 21 of the period's 31 days left
    response = await client.post(
        f"/subscriptions/{sub['id']}/change-plan", json={"planCode": "PRO_MONTHLY"}, headers=key()
    )
    assert response.status_code == 200, response.text
    body = response.json()
    # credit = floor(990*21/31) = 670, charge = floor(2990*21/31) = 2025
    assert (body["changed"], body["due"], body["creditGranted"]) == (True, 1355, 0)
    assert body["subscription"]["plan"]["code"] == "PRO_MONTHLY"
    assert body["subscription"]["version"] == 1
    invoice = (
        await rows(engine, "SELECT * FROM invoice WHERE id = :i", i=body["prorationInvoiceId"])
    )[0]
    assert invoice["kind"] == "PRORATION"
    assert (invoice["amount"], invoice["status"]) == (1355, "OPEN")
    assert invoice["period_start"] == clock.now()
    assert invoice["next_attempt_at"] == clock.now()
    assert invoice["period_end"].isoformat() == "2026-04-10T09:30:00+00:00"
    assert (await events_of(engine, sub["id"]))[-2:] == [
        "SubscriptionPlanChanged",
        "InvoiceCreated",
    ]


async def test_downgrade_adds_credit_and_later_upgrade_uses_it(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    sub = await subscribe(client, plan="PRO_MONTHLY")
    clock.advance(timedelta(days=10))
    down = await client.post(
        f"/subscriptions/{sub['id']}/change-plan", json={"planCode": "BASIC_MONTHLY"}, headers=key()
    )
    assert down.status_code == 200, down.text
    assert (down.json()["due"], down.json()["creditGranted"]) == (-1355, 1355)
    assert down.json()["prorationInvoiceId"] is None
    assert down.json()["subscription"]["creditBalance"] == 1355

    up = await client.post(
        f"/subscriptions/{sub['id']}/change-plan",
        json={"planCode": "BUSINESS_MONTHLY"},
        headers=key(),
    )
    assert up.status_code == 200, up.text
    # credit = floor(990*21/31) = 670, charge = floor(9990*21/31) = 6767, due = 6097
    assert up.json()["due"] == 6097
    assert up.json()["subscription"]["creditBalance"] == 0
    invoice = (
        await rows(engine, "SELECT * FROM invoice WHERE id = :i", i=up.json()["prorationInvoiceId"])
    )[0]
    assert (invoice["subtotal"], invoice["credit_applied"], invoice["amount"]) == (6097, 1355, 4742)
    ledger = await rows(
        engine,
        "SELECT amount, reason FROM credit_entry WHERE subscription_id = :s ORDER BY id",
        s=sub["id"],
    )
    assert ledger == [
        {"amount": 1355, "reason": "DOWNGRADE"},
        {"amount": -1355, "reason": "INVOICE"},
    ]


async def test_change_plan_same_plan_is_noop_and_incompatible_is_422(
    client: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    sub = await subscribe(client, plan="BASIC_MONTHLY")
    same = await client.post(
        f"/subscriptions/{sub['id']}/change-plan", json={"planCode": "BASIC_MONTHLY"}, headers=key()
    )
    assert same.status_code == 200
    assert (same.json()["changed"], same.json()["subscription"]["version"]) == (False, 0)

    usd = await client.post(
        f"/subscriptions/{sub['id']}/change-plan",
        json={"planCode": "TEAM_MONTHLY_USD"},
        headers=key(),
    )
    assert "USD" in assert_problem(usd, 422, "plan-change-not-allowed")["detail"]
    unknown = await client.post(
        f"/subscriptions/{sub['id']}/change-plan", json={"planCode": "GOLD"}, headers=key()
    )
    assert_problem(unknown, 422, "unknown-plan")
    assert await scalar(engine, "SELECT count(*) FROM invoice") == 1


async def test_list_invoices_newest_first_with_cursor_and_offset(
    client: httpx.AsyncClient, clock: ManualClock
) -> None:
    sub = await subscribe(client, plan="BASIC_MONTHLY")
    plans = ["PRO_MONTHLY", "BUSINESS_MONTHLY"]
    for plan in plans:  # two upgrades: two PRORATION invoices after the first RENEWAL
        clock.advance(timedelta(days=1))
        r = await client.post(
            f"/subscriptions/{sub['id']}/change-plan", json={"planCode": plan}, headers=key()
        )
        assert r.status_code == 200, r.text
    first = await client.get(f"/subscriptions/{sub['id']}/invoices", params={"limit": 2})
    assert first.status_code == 200
    page1 = first.json()
    assert [i["kind"] for i in page1["items"]] == ["PRORATION", "PRORATION"]
    assert page1["items"][0]["id"] > page1["items"][1]["id"]
    second = await client.get(
        f"/subscriptions/{sub['id']}/invoices",
        params={"limit": 2, "cursor": page1["nextCursor"]},
    )
    page2 = second.json()
    assert [i["kind"] for i in page2["items"]] == ["RENEWAL"]
    assert page2["nextCursor"] is None
    by_offset = await client.get(
        f"/subscriptions/{sub['id']}/invoices", params={"limit": 1, "offset": 2}
    )
    assert [i["kind"] for i in by_offset.json()["items"]] == ["RENEWAL"]

    assert_problem(
        await client.get(f"/subscriptions/{sub['id']}/invoices", params={"cursor": "!!"}),
        400,
        "invalid-cursor",
    )
    assert_problem(await client.get("/subscriptions/777/invoices"), 404, "subscription-not-found")
    assert_problem(
        await client.get(f"/subscriptions/{sub['id']}/invoices", params={"limit": 0}),
        422,
        "validation-error",
    )


async def test_cancel_returns_credit_of_voided_invoices_and_canceled_keeps_its_plan(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    sub = await subscribe(client, plan="PRO_MONTHLY")
    clock.advance(timedelta(days=10))
    for plan in ("BASIC_MONTHLY", "BUSINESS_MONTHLY"):  # credit 1355, then consumed by upgrade
        r = await client.post(
            f"/subscriptions/{sub['id']}/change-plan", json={"planCode": plan}, headers=key()
        )
        assert r.status_code == 200, r.text
    canceled = await client.post(
        f"/subscriptions/{sub['id']}/cancel", json={"atPeriodEnd": False}, headers=key()
    )
    assert canceled.status_code == 200
    assert canceled.json()["creditBalance"] == 1355
    assert canceled.json()["version"] == 3
    statuses = await rows(
        engine, "SELECT status FROM invoice WHERE subscription_id = :s", s=sub["id"]
    )
    assert {r["status"] for r in statuses} == {"VOID"}
    ledger = await rows(
        engine,
        "SELECT amount, reason FROM credit_entry WHERE subscription_id = :s ORDER BY id",
        s=sub["id"],
    )
    assert ledger[-1] == {"amount": 1355, "reason": "VOID_REFUND"}
    assert (await events_of(engine, sub["id"]))[-3:] == [
        "InvoiceVoided",
        "InvoiceVoided",
        "SubscriptionCanceled",
    ]

    refused = await client.post(
        f"/subscriptions/{sub['id']}/change-plan", json={"planCode": "PRO_MONTHLY"}, headers=key()
    )
    assert_problem(refused, 409, "state-conflict")


async def test_a_read_by_id_answers_as_declared_whatever_the_spelling_of_the_id(
    client: httpx.AsyncClient, anonymous: httpx.AsyncClient
) -> None:
    """GET /subscriptions/{id} answers as its declaration says for every spelling of the id: a
    read, a validation problem out of range or not a number, 401 without a key."""
    sub = await subscribe(client)
    plain = await client.get(f"/subscriptions/{sub['id']}")
    assert plain.status_code == 200
    assert plain.json()["id"] == sub["id"]
    padded = await client.get(f"/subscriptions/00{sub['id']}")
    assert padded.status_code == 200
    assert padded.content == plain.content
    for bad in ("0", "-1", "abc", "1.5", "9223372036854775808"):
        assert_problem(await client.get(f"/subscriptions/{bad}"), 422, "validation-error")
    assert_problem(
        await client.get("/subscriptions/9223372036854775807"), 404, "subscription-not-found"
    )
    assert (await anonymous.get(f"/subscriptions/{sub['id']}")).status_code == 401


async def test_a_create_answers_as_declared_whatever_the_request(
    client: httpx.AsyncClient, anonymous: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    """POST /subscriptions answers every request as declared, problems included, in the
    declared order (an unreadable body before the key, the key before the Idempotency-Key)."""
    customer = (await new_customer(client))["id"]
    valid = json.dumps({"customerId": customer, "planCode": "BASIC_MONTHLY"}).encode()

    async def post(
        body: bytes, content_type: str | None = "application/json", **headers: str
    ) -> httpx.Response:
        sent = {**headers, **({"Content-Type": content_type} if content_type else {})}
        return await client.post("/subscriptions", content=body, headers=sent)

    with_charset = await post(valid, "application/json; charset=utf-8", **key())
    assert with_charset.status_code == 201, with_charset.text
    for body, content_type in (
        (valid, "text/plain"),
        (b"[]", "application/json"),
        (b"null", "application/json"),
        (b'{"customerId": "x", "planCode": "BASIC_MONTHLY"}', "application/json"),
        (valid[:-1] + b', "extra": 1}', "application/json"),
    ):
        assert_problem(await post(body, content_type, **key()), 422, "validation-error")
    assert_problem(await post(b"{", **key()), 400, "malformed-json")
    assert_problem(
        await anonymous.post(
            "/subscriptions", content=b"{", headers={"Content-Type": "application/json", **key()}
        ),
        400,
        "malformed-json",
    )
    no_key = await anonymous.post(
        "/subscriptions", content=valid, headers={"Content-Type": "application/json", **key()}
    )
    assert_problem(no_key, 401, "unauthorized")
    assert_problem(await post(valid), 400, "idempotency-key-required")
    assert_problem(await post(valid, **{"Idempotency-Key": " "}), 400, "idempotency-key-invalid")
    assert await scalar(engine, "SELECT count(*) FROM subscription") == 1
