"""The ledger evidence read over HTTP from a real gateway simulator process."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from billing_core.invariants.ledger import LedgerEvidence, fetch_ledger
from tests.integration.invariants.conftest import Scene
from tests.support.processes import Proc, free_port, start


@pytest.fixture
def simulator(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc: Proc = start(
        "gateway-sim",
        "services.gateway_sim",
        {
            "BILLING_GATEWAY_SIM_PORT": str(port),
            "BILLING_GATEWAY_SIM_LATENCY_MIN_MS": "0",
            "BILLING_GATEWAY_SIM_LATENCY_MAX_MS": "0",
        },
        tmp_path,
        ready_url=f"{url}/healthz",
    )
    try:
        yield url
    finally:
        proc.terminate()


async def charge(client: httpx.AsyncClient, invoice: int, attempt: int, amount: int) -> None:
    response = await client.post(
        "/v1/charges",
        headers={"Idempotency-Key": f"inv-{invoice}-try-{attempt}"},
        json={
            "customerId": 1,
            "amount": amount,
            "currency": "EUR",
            "metadata": {"invoiceId": invoice, "attempt": attempt},
        },
    )
    assert response.status_code == 200, response.text


async def test_the_gateway_ledger_over_http(scene: Scene, simulator: str) -> None:
    async with httpx.AsyncClient(base_url=simulator, timeout=10) as client:
        for invoice in scene.world.charged:
            await charge(client, invoice, 0, 990)
            await charge(client, invoice, 0, 990)  # a replay: not a second charge
        ledger = await fetch_ledger(simulator)
        assert ledger.successes == dict(scene.world.charged)
        assert ledger.duplicate_success_invoices == []
        report = await scene.check(ledger=ledger)
        assert report.ok, [str(v) for c in report.checks for v in c.violations]

        twice = scene.world.invoices[("a", 2)]
        await charge(client, twice, 1, 990)  # another key for a PAID invoice: charged again
        listed = (await client.get("/v1/ledger/charges", params={"invoiceId": twice})).json()
    ledger = await fetch_ledger(simulator)
    assert ledger.duplicate_success_invoices == [twice]
    assert LedgerEvidence.from_charges(listed) == LedgerEvidence({twice: 2}, [twice])
    charges = (await scene.check(ledger=ledger)).check("charges")
    assert charges.kinds() == {"double_charge": 1}
    assert charges.ids("double_charge") == [twice]


async def test_a_restarted_gateway_vouches_only_for_what_it_saw(
    scene: Scene, simulator: str
) -> None:
    """A simulator's ledger starts empty with its process: invoices PAID before it began are
    checked against the payment attempts instead (a second demo after restarting `make up`
    checks clean), and those PAID after it still need its charge."""
    async with httpx.AsyncClient(base_url=simulator, timeout=10) as client:
        assert (await client.post("/v1/admin/reset")).status_code == 200
    ledger = await fetch_ledger(simulator)
    assert ledger.successes == {}
    assert ledger.started_at is not None
    assert abs(ledger.started_at - datetime.now(UTC)) < timedelta(seconds=30)
    report = await scene.check(ledger=ledger)
    assert report.ok, [str(v) for c in report.checks for v in c.violations]
    paid = sum(1 for n in scene.world.charged.values() if n)
    assert any(
        note.startswith(f"{paid} invoices PAID before the gateway ledger began")
        for note in report.check("charges").notes
    ), report.check("charges").notes

    unattested, after = scene.world.invoices[("a", 1)], scene.world.invoices[("a", 2)]
    async with scene.engine.begin() as conn:
        await conn.execute(
            text("DELETE FROM payment_attempt WHERE invoice_id = :i"), {"i": unattested}
        )
        await conn.execute(
            text("UPDATE invoice SET paid_at = :t WHERE id = :i"),
            {"i": after, "t": ledger.started_at + timedelta(seconds=1)},
        )
    charges = (await scene.check(ledger=ledger)).check("charges")
    assert charges.kinds() == {"paid_without_charge": 2}
    assert sorted(charges.ids("paid_without_charge")) == sorted([unattested, after])
