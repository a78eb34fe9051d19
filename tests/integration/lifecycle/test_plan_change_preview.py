"""change-plan?preview=true runs the real change and rolls it back: it answers exactly what the
real call then does, and writes nothing."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from tests.integration.api.helpers import assert_problem, scalar, subscribe


async def written(engine: AsyncEngine) -> tuple[int, ...]:
    return tuple(
        [
            await scalar(engine, "SELECT count(*) FROM invoice"),
            await scalar(engine, "SELECT count(*) FROM outbox_event"),
            await scalar(engine, "SELECT count(*) FROM credit_entry"),
            await scalar(engine, "SELECT coalesce(sum(version), 0) FROM subscription"),
            await scalar(engine, "SELECT count(*) FROM idempotency_key"),
        ]
    )


def without(body: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in keys}


@pytest.mark.parametrize(
    ("start_plan", "new_plan"), [("BASIC_MONTHLY", "PRO_MONTHLY"), ("PRO_MONTHLY", "BASIC_MONTHLY")]
)
async def test_the_preview_is_what_the_change_then_does(
    client: httpx.AsyncClient,
    engine: AsyncEngine,
    clock: ManualClock,
    start_plan: str,
    new_plan: str,
) -> None:
    sub = await subscribe(client, plan=start_plan)
    clock.advance(timedelta(days=9, hours=3))
    before = await written(engine)
    preview = await client.post(
        f"/subscriptions/{sub['id']}/change-plan?preview=true",
        json={"planCode": new_plan},
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    assert preview.status_code == 200, preview.text
    assert await written(engine) == before
    assert "etag" not in preview.headers

    real = await client.post(f"/subscriptions/{sub['id']}/change-plan", json={"planCode": new_plan})
    assert real.status_code == 200, real.text
    previewed, done = preview.json(), real.json()
    assert (previewed["preview"], done["preview"]) == (True, False)
    assert previewed["prorationInvoiceId"] is None
    assert without(previewed, "preview", "prorationInvoiceId") == without(
        done, "preview", "prorationInvoiceId"
    )
    assert previewed["due"] != 0
    if previewed["due"] > 0:
        assert done["prorationInvoiceId"] is not None and previewed["prorationAmount"] > 0
    else:
        assert previewed["creditGranted"] == -previewed["due"]


async def test_a_refused_change_is_refused_in_preview_too(client: httpx.AsyncClient) -> None:
    sub = await subscribe(client, plan="BASIC_MONTHLY")
    for path in ("change-plan?preview=true", "change-plan"):
        assert_problem(
            await client.post(
                f"/subscriptions/{sub['id']}/{path}", json={"planCode": "TEAM_MONTHLY_USD"}
            ),
            422,
            "plan-change-not-allowed",
        )


async def test_proration_none_charges_and_credits_nothing_until_the_renewal(
    client: httpx.AsyncClient, engine: AsyncEngine, clock: ManualClock
) -> None:
    up = await subscribe(client, plan="BASIC_MONTHLY")
    down = await subscribe(client, plan="PRO_MONTHLY")
    clock.advance(timedelta(days=9))
    for sub, plan in ((up, "PRO_MONTHLY"), (down, "BASIC_MONTHLY")):
        response = await client.post(
            f"/subscriptions/{sub['id']}/change-plan",
            json={"planCode": plan, "prorationBehavior": "none"},
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert (body["changed"], body["due"], body["prorationInvoiceId"]) == (True, 0, None)
        assert (body["creditGranted"], body["subscription"]["creditBalance"]) == (0, 0)
        preview = (await client.get(f"/subscriptions/{sub['id']}/upcoming-invoice")).json()
        assert preview["subtotal"] == (2990 if plan == "PRO_MONTHLY" else 990)
    assert await scalar(engine, "SELECT count(*) FROM invoice WHERE kind = 'PRORATION'") == 0
    assert await scalar(engine, "SELECT count(*) FROM credit_entry") == 0
    assert_problem(
        await client.post(
            f"/subscriptions/{up['id']}/change-plan",
            json={"planCode": "BASIC_MONTHLY", "prorationBehavior": "sometimes"},
        ),
        422,
        "validation-error",
    )


@pytest.mark.parametrize(
    ("start_plan", "new_plan", "behavior"),
    [
        ("BASIC_MONTHLY", "PRO_YEARLY", "create_prorations"),
        ("PRO_YEARLY", "BASIC_MONTHLY", "always_invoice"),
        ("BASIC_YEARLY", "PRO_MONTHLY", "none"),
    ],
)
async def test_the_preview_of_a_change_to_another_interval_is_what_the_change_then_does(
    client: httpx.AsyncClient,
    engine: AsyncEngine,
    clock: ManualClock,
    start_plan: str,
    new_plan: str,
    behavior: str,
) -> None:
    sub = await subscribe(client, plan=start_plan)
    clock.advance(timedelta(days=20, hours=6))
    body = {"planCode": new_plan, "prorationBehavior": behavior}
    before = await written(engine)
    preview = await client.post(f"/subscriptions/{sub['id']}/change-plan?preview=true", json=body)
    assert preview.status_code == 200, preview.text
    assert await written(engine) == before

    real = await client.post(f"/subscriptions/{sub['id']}/change-plan", json=body)
    assert real.status_code == 200, real.text
    previewed, done = preview.json(), real.json()
    assert previewed["periodInvoiceId"] is None and done["periodInvoiceId"] is not None
    assert without(previewed, "preview", "periodInvoiceId") == without(
        done, "preview", "periodInvoiceId"
    )
    # The new period (anchor at the change) and what its invoice charges, as previewed.
    assert previewed["subscription"]["currentPeriodStart"] == done["subscription"]["billingAnchor"]
    amount = await scalar(
        engine, "SELECT amount FROM invoice WHERE id = :i", i=done["periodInvoiceId"]
    )
    assert previewed["periodInvoiceAmount"] == amount
    assert (previewed["creditGranted"] == 0) == (behavior == "none")
