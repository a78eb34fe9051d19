"""Refunds: idempotent per key, ledgered, with the charges' faults and their own refusals."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.integration.gateway_sim.conftest import charge, configure, summary


async def refund(
    client: httpx.AsyncClient,
    charge_id: str,
    amount: int = 1990,
    *,
    key: str = "ref-1",
    timeout: float | None = None,
) -> httpx.Response:
    return await client.post(
        "/v1/refunds",
        json={"chargeId": charge_id, "amount": amount},
        headers={"Idempotency-Key": key},
        timeout=timeout if timeout is not None else client.timeout,
    )


async def refunds_of(client: httpx.AsyncClient, invoice: int) -> list[dict[str, Any]]:
    response = await client.get("/v1/ledger/refunds", params={"invoiceId": invoice})
    assert response.status_code == 200, response.text
    body: list[dict[str, Any]] = response.json()
    return body


async def charged(client: httpx.AsyncClient, invoice: int) -> str:
    response = await charge(client, invoice=invoice)
    assert response.status_code == 200, response.text
    charge_id: str = response.json()["id"]
    return charge_id


async def test_a_refund_is_made_once_per_key_and_replayed(gw: httpx.AsyncClient) -> None:
    charge_id = await charged(gw, 21)
    first = await refund(gw, charge_id, key="ref-7")
    again = await refund(gw, charge_id, key="ref-7")

    assert first.status_code == 200
    body = first.json()
    assert (body["status"], body["chargeId"], body["amount"], body["currency"]) == (
        "succeeded",
        charge_id,
        1990,
        "EUR",
    )
    assert body["id"].startswith("re_")
    assert "idempotent-replayed" not in first.headers
    assert again.status_code == 200
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == body
    assert [r["idempotencyKey"] for r in await refunds_of(gw, 21)] == ["ref-7"]
    totals = await summary(gw)
    assert (totals["refunds_succeeded"], totals["refund_replays"]) == (1, 1)
    assert totals["amount_refunded"] == {"EUR": 1990}


async def test_concurrent_requests_with_one_key_make_one_refund(gw: httpx.AsyncClient) -> None:
    charge_id = await charged(gw, 22)
    await configure(gw, latency_min_ms=100, latency_max_ms=100)
    answers = await asyncio.gather(*(refund(gw, charge_id, key="ref-8") for _ in range(5)))
    assert {a.status_code for a in answers} == {200}
    assert len({a.json()["id"] for a in answers}) == 1
    assert len(await refunds_of(gw, 22)) == 1


async def test_the_same_key_with_other_parameters_is_a_conflict(gw: httpx.AsyncClient) -> None:
    charge_id = await charged(gw, 23)
    assert (await refund(gw, charge_id, 1000, key="ref-9")).status_code == 200
    conflict = await refund(gw, charge_id, 990, key="ref-9")
    assert conflict.status_code == 409
    assert conflict.headers["content-type"] == "application/problem+json"
    assert [r["amount"] for r in await refunds_of(gw, 23)] == [1000]
    assert (await summary(gw))["refund_conflicts"] == 1


async def test_never_more_than_was_charged_nor_an_unknown_or_declined_charge(
    gw: httpx.AsyncClient,
) -> None:
    charge_id = await charged(gw, 24)
    assert (await refund(gw, charge_id, 1500, key="ref-10")).status_code == 200
    too_much = await refund(gw, charge_id, 500, key="ref-11")
    assert too_much.status_code == 422
    assert "490 is left" in too_much.json()["detail"]
    unknown = await refund(gw, "ch_nope", key="ref-12")
    assert unknown.status_code == 404
    assert unknown.headers["content-type"] == "application/problem+json"
    await configure(gw, decline_rate=1.0)
    declined = (await charge(gw, invoice=25)).json()["id"]
    assert (await refund(gw, declined, key="ref-13")).status_code == 422
    assert (await refund(gw, charge_id, 0, key="ref-14")).status_code == 400
    assert (await summary(gw))["refunds_succeeded"] == 1


async def test_a_refused_refund_is_stored_and_answered_the_same_way_again(
    gw: httpx.AsyncClient,
) -> None:
    charge_id = await charged(gw, 26)
    await configure(gw, refund_failure_rate=1.0)
    first = await refund(gw, charge_id, key="ref-15")
    await configure(gw, refund_failure_rate=0.0)
    again = await refund(gw, charge_id, key="ref-15")
    assert (first.status_code, first.json()["status"]) == (402, "failed")
    assert first.json()["detail"]
    assert again.status_code == 402
    assert again.headers["idempotent-replayed"] == "true"
    # Refused: nothing went back, so a refund under a new key can still be made.
    assert (await refund(gw, charge_id, key="ref-16")).status_code == 200
    totals = await summary(gw)
    assert (totals["refunds_failed"], totals["refunds_succeeded"]) == (1, 1)


async def test_a_5xx_refunds_nothing_and_leaves_the_key_free(gw: httpx.AsyncClient) -> None:
    charge_id = await charged(gw, 27)
    await configure(gw, error_rate=1.0)
    failed = await refund(gw, charge_id, key="ref-17")
    assert failed.status_code in (500, 502, 503)
    assert await refunds_of(gw, 27) == []
    await configure(gw, error_rate=0.0)
    assert (await refund(gw, charge_id, key="ref-17")).status_code == 200
    assert len(await refunds_of(gw, 27)) == 1


async def test_a_late_answer_refunds_and_the_retry_gets_the_stored_refund(
    gw: httpx.AsyncClient,
) -> None:
    charge_id = await charged(gw, 28)
    await configure(gw, timeout_rate=1.0, timeout_delay_seconds=5.0)
    try:
        await refund(gw, charge_id, key="ref-18", timeout=0.5)
        raise AssertionError("the answer should have come too late")
    except httpx.ReadTimeout:
        pass
    await configure(gw, timeout_rate=0.0)
    retry = await refund(gw, charge_id, key="ref-18")
    assert retry.status_code == 200
    assert retry.headers["idempotent-replayed"] == "true"
    assert len(await refunds_of(gw, 28)) == 1


async def test_refunds_share_the_rate_limit_and_the_credentials_check(
    gw: httpx.AsyncClient,
) -> None:
    charge_id = await charged(gw, 29)
    await configure(gw, reject_credentials=True)
    assert (await refund(gw, charge_id, key="ref-19")).status_code == 401
    await configure(gw, reject_credentials=False, rate_limit_per_second=1)
    limited = await refund(gw, charge_id, key="ref-19")
    assert limited.status_code == 429
    assert int(limited.headers["retry-after"]) >= 1
    assert await refunds_of(gw, 29) == []


async def test_the_ledger_counts_refunds_by_invoice(gw: httpx.AsyncClient) -> None:
    first, second = await charged(gw, 30), await charged(gw, 31)
    await refund(gw, first, key="ref-20")
    await refund(gw, second, 100, key="ref-21")
    await refund(gw, second, 100, key="ref-22")
    by_invoice = (await gw.get("/v1/ledger/refunds-by-invoice")).json()
    assert by_invoice == [[30, 1], [31, 2]]
