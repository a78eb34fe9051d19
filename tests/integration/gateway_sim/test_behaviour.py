"""Declines, card declines until a date, reproducible draws, run-time configuration."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx

from services.gateway_sim.behaviour import CONTRACT_DECLINE_CODES
from tests.integration.gateway_sim.conftest import charge, configure, summary


def _outcome(response: httpx.Response) -> dict[str, object]:
    body: dict[str, object] = response.json()
    body.pop("created")  # the second it happened
    return body


async def test_declines_follow_the_rate_and_the_seed(gw: httpx.AsyncClient) -> None:
    await configure(gw, decline_rate=0.4)
    first_run = [_outcome(await charge(gw, invoice=n)) for n in range(200)]
    assert (await gw.post("/v1/admin/reset")).status_code == 200
    await configure(gw, decline_rate=0.4)
    second_run = [_outcome(await charge(gw, invoice=n)) for n in range(200)]

    declined = [c for c in first_run if c["status"] == "declined"]
    # 200 draws at p = 0.4: mean 80, standard deviation 6.9; allow 4 deviations.
    assert 52 <= len(declined) <= 108
    assert {c["declineCode"] for c in declined} <= set(CONTRACT_DECLINE_CODES)
    assert len({c["declineCode"] for c in declined}) > 1
    assert second_run == first_run  # same seed, same order of calls: same outcomes and ids
    assert (await summary(gw))["declines"] == len(declined)


async def test_card_declines_until_the_date_then_succeeds(gw: httpx.AsyncClient) -> None:
    until = datetime.now(UTC) + timedelta(hours=1)
    order = await gw.post(
        "/v1/admin/customers/7/decline-until",
        json={"until": until.isoformat(), "code": "insufficient_funds"},
    )
    assert order.status_code == 200
    assert order.json()["active"] is True

    declined = await charge(gw, invoice=21, attempt=0, customer=7)
    other_customer = await charge(gw, invoice=22, customer=8)
    # The simulator's "now" is the real UTC clock plus the admin clock offset: move it past.
    await configure(gw, clock_offset_seconds=2 * 3600)
    later = await charge(gw, invoice=21, attempt=1, customer=7)

    assert declined.status_code == 402
    assert declined.json()["declineCode"] == "insufficient_funds"
    assert other_customer.status_code == 200
    assert later.status_code == 200
    assert later.json()["created"] >= int(until.timestamp())


async def test_clearing_a_decline_order(gw: httpx.AsyncClient) -> None:
    until = (datetime.now(UTC) + timedelta(days=3)).isoformat()
    await gw.post("/v1/admin/customers/9/decline-until", json={"until": until})
    assert (await charge(gw, invoice=23, customer=9)).status_code == 402

    cleared = await gw.post("/v1/admin/customers/9/decline-until", json={"until": None})

    assert cleared.json()["active"] is False
    assert (await charge(gw, invoice=23, attempt=1, customer=9)).status_code == 200


async def test_decline_order_needs_an_aware_date(gw: httpx.AsyncClient) -> None:
    response = await gw.post(
        "/v1/admin/customers/9/decline-until", json={"until": "2030-01-01T00:00:00"}
    )
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"


async def test_invalid_configuration_is_refused_and_changes_nothing(
    gw: httpx.AsyncClient,
) -> None:
    before = (await gw.get("/v1/admin/config")).json()

    refused = [
        await gw.post("/v1/admin/config", json=change)
        for change in (
            {"decline_rate": 1.5},
            {"latency_min_ms": 500, "latency_max_ms": 100},
            {"webhook_url": "http://127.0.0.1:1/hook"},  # no secret
            {"no_such_setting": 1},
        )
    ]

    assert [r.status_code for r in refused] == [422, 422, 422, 422]
    assert (await gw.get("/v1/admin/config")).json() == before


async def test_configuration_does_not_echo_the_webhook_secret(gw: httpx.AsyncClient) -> None:
    shown = await configure(gw, webhook_url="http://127.0.0.1:1/hook", webhook_secret="s3cret")
    assert shown["webhook_secret_set"] is True
    assert "s3cret" not in str(shown)
