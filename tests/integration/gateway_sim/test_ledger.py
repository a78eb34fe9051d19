"""The audit ledger and the metrics: the figures an invariant checker relies on."""

from __future__ import annotations

import httpx

from tests.integration.gateway_sim.conftest import charge, configure, ledger_charges, summary


async def test_an_invoice_charged_under_two_keys_is_reported(gw: httpx.AsyncClient) -> None:
    assert (await charge(gw, invoice=31, attempt=0)).status_code == 200
    assert (await charge(gw, invoice=31, attempt=1)).status_code == 200  # a double charge
    await configure(gw, decline_rate=1.0)
    assert (await charge(gw, invoice=32, attempt=0)).status_code == 402
    await configure(gw, decline_rate=0.0)
    assert (await charge(gw, invoice=32, attempt=1)).status_code == 200  # dunning, fine
    assert (await charge(gw, invoice=33)).status_code == 200
    assert (await charge(gw, invoice=33)).status_code == 200  # a replay, fine

    totals = await summary(gw)

    assert totals["duplicate_success_invoices"] == [31]
    assert totals["calls"] == 6
    assert totals["charges_succeeded"] == 4
    assert totals["declines"] == 1
    assert totals["replays"] == 1
    assert totals["amount_succeeded"] == {"EUR": 4 * 1990}
    invoice_31 = await ledger_charges(gw, invoiceId=31)
    assert [(c["idempotencyKey"], c["status"]) for c in invoice_31] == [
        ("inv-31-try-0", "succeeded"),
        ("inv-31-try-1", "succeeded"),
    ]
    assert len({c["id"] for c in invoice_31}) == 2
    invoice_32 = await ledger_charges(gw, invoiceId=32)
    assert [c["status"] for c in invoice_32] == ["declined", "succeeded"]
    by_key = await ledger_charges(gw, idempotencyKey="inv-33-try-0")
    assert [c["metadata"]["invoiceId"] for c in by_key] == [33]


async def test_calls_per_second_adds_up_to_the_calls(gw: httpx.AsyncClient) -> None:
    for n in range(25):
        await charge(gw, invoice=40 + n)

    rows = (await gw.get("/v1/ledger/calls-per-second")).json()

    assert sum(row["calls"] for row in rows) == 25 == (await summary(gw))["calls"]
    assert [row["second"] for row in rows] == sorted(row["second"] for row in rows)


async def test_ledger_charges_needs_a_filter(gw: httpx.AsyncClient) -> None:
    response = await gw.get("/v1/ledger/charges")
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"


async def test_reset_empties_the_ledger(gw: httpx.AsyncClient) -> None:
    await charge(gw, invoice=50)
    assert (await gw.post("/v1/admin/reset")).status_code == 200
    totals = await summary(gw)
    assert (totals["calls"], totals["charges_succeeded"]) == (0, 0)
    assert await ledger_charges(gw, invoiceId=50) == []


async def test_metrics_count_calls_by_outcome(gw: httpx.AsyncClient) -> None:
    def value(text: str, sample: str) -> float:
        line = next(line for line in text.splitlines() if line.startswith(sample + " "))
        return float(line.split()[-1])

    before = (await gw.get("/metrics")).text
    await charge(gw, invoice=60)
    await charge(gw, invoice=60)
    await configure(gw, rate_limit_per_second=1)
    await charge(gw, invoice=61)

    after = (await gw.get("/metrics")).text
    for sample, delta in (
        ('billing_gateway_sim_calls_total{outcome="succeeded"}', 1),
        ('billing_gateway_sim_calls_total{outcome="replayed"}', 1),
        ('billing_gateway_sim_calls_total{outcome="rate_limited"}', 1),
        ("billing_gateway_sim_rate_limited_total", 1),
    ):
        assert value(after, sample) - value(before, sample) == delta, sample
