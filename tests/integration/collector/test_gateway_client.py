"""HttpPaymentGateway against the simulator process: how every kind of answer is classified."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from billing_core.domain.charge_result import ChargeOutcome
from billing_core.domain.refund import RefundOutcome
from billing_core.gateway import ChargeResult, HttpPaymentGateway
from tests.integration.collector.conftest import Simulator
from tests.support.processes import free_port


async def charge(gateway: HttpPaymentGateway, key: str, customer: int = 1) -> ChargeResult:
    invoice_id = int(key.split("-")[1])
    return await gateway.charge(
        customer, 990, "EUR", key, {"invoiceId": invoice_id, "attempt": int(key.rsplit("-", 1)[1])}
    )


async def test_success_decline_and_replay(simulator: Simulator) -> None:
    simulator.decline_until(
        66, (datetime.now(UTC) + timedelta(hours=1)).isoformat(), code="expired_card"
    )
    gateway = HttpPaymentGateway(simulator.url, max_connections=4)
    try:
        ok = await charge(gateway, "inv-1-try-0")
        declined = await charge(gateway, "inv-2-try-0", customer=66)
        replay = await charge(gateway, "inv-1-try-0")
    finally:
        await gateway.aclose()
    assert ok.outcome == ChargeOutcome.SUCCESS and ok.http_status == 200
    assert ok.gateway_reference is not None and ok.gateway_reference.startswith("ch_")
    assert (declined.outcome, declined.decline_code, declined.http_status) == (
        ChargeOutcome.DECLINED,
        "expired_card",
        402,
    )
    assert replay.outcome == ChargeOutcome.SUCCESS
    assert replay.gateway_reference == ok.gateway_reference
    assert simulator.summary()["charges_succeeded"] == 1


async def test_server_error_is_unknown(simulator: Simulator) -> None:
    simulator.config(error_rate=1.0)
    gateway = HttpPaymentGateway(simulator.url, max_connections=4)
    try:
        result = await charge(gateway, "inv-3-try-0")
    finally:
        await gateway.aclose()
    assert result.outcome == ChargeOutcome.UNKNOWN
    assert result.http_status is not None and result.http_status >= 500
    assert result.error == f"http {result.http_status}"


async def test_rate_limited_is_unknown(simulator: Simulator) -> None:
    simulator.config(rate_limit_per_second=2)
    gateway = HttpPaymentGateway(simulator.url, max_connections=8)
    try:
        results = await asyncio.gather(*[charge(gateway, f"inv-{i}-try-0") for i in range(10, 16)])
    finally:
        await gateway.aclose()
    limited = [r for r in results if r.http_status == 429]
    assert len(limited) >= 4
    assert all(r.outcome == ChargeOutcome.UNKNOWN for r in limited)
    assert simulator.summary()["charges_succeeded"] == 6 - len(limited)


async def test_no_answer_in_time_is_unknown(simulator: Simulator) -> None:
    simulator.config(timeout_rate=1.0, timeout_delay_seconds=2.0)
    gateway = HttpPaymentGateway(simulator.url, max_connections=4, read_timeout=0.5)
    try:
        result = await charge(gateway, "inv-20-try-0")
    finally:
        await gateway.aclose()
    assert result.outcome == ChargeOutcome.UNKNOWN
    assert result.http_status is None
    assert result.error is not None and result.error.startswith("timeout")


async def test_connection_refused_is_unknown() -> None:
    gateway = HttpPaymentGateway(f"http://127.0.0.1:{free_port()}", connect_timeout=0.5)
    try:
        result = await charge(gateway, "inv-21-try-0")
    finally:
        await gateway.aclose()
    assert result.outcome == ChargeOutcome.UNKNOWN
    assert result.http_status is None
    assert result.error is not None and result.error.startswith("transport")


async def test_refund_answers_are_classified(simulator: Simulator) -> None:
    gateway = HttpPaymentGateway(simulator.url, max_connections=4)
    try:
        charged = await charge(gateway, "inv-40-try-0")
        assert charged.gateway_reference is not None
        reference = charged.gateway_reference
        done = await gateway.refund(reference, 990, "EUR", "ref-1")
        replay = await gateway.refund(reference, 990, "EUR", "ref-1")
        reused = await gateway.refund(reference, 500, "EUR", "ref-1")
        unknown_charge = await gateway.refund("ch_nothing", 990, "EUR", "ref-2")
        fresh = await charge(gateway, "inv-42-try-0")
        assert fresh.gateway_reference is not None
        simulator.config(error_rate=1.0)
        server_error = await gateway.refund(fresh.gateway_reference, 990, "EUR", "ref-3")
        simulator.config(error_rate=0.0, refund_failure_rate=1.0)
        other = await charge(gateway, "inv-41-try-0")
        assert other.gateway_reference is not None
        refused = await gateway.refund(other.gateway_reference, 990, "EUR", "ref-4")
    finally:
        await gateway.aclose()
    assert (done.outcome, done.http_status, done.error) == (RefundOutcome.SUCCEEDED, 200, None)
    assert done.gateway_reference is not None and done.gateway_reference.startswith("re_")
    assert (replay.outcome, replay.gateway_reference) == (
        RefundOutcome.SUCCEEDED,
        done.gateway_reference,
    )
    assert reused.outcome == RefundOutcome.FAILED
    assert reused.error is not None and reused.error.startswith("http 409: ")
    assert unknown_charge.outcome == RefundOutcome.FAILED
    assert unknown_charge.error is not None and "No charge" in unknown_charge.error
    assert (server_error.outcome, server_error.error) == (
        RefundOutcome.UNKNOWN,
        f"http {server_error.http_status}",
    )
    assert refused.outcome == RefundOutcome.FAILED
    assert refused.error is not None and refused.error.startswith("http 402: ")
    assert simulator.summary()["refunds_succeeded"] == 1


async def test_lookup_tells_charged_declined_never_seen_and_still_unknown(
    simulator: Simulator,
) -> None:
    """The look-up by key: the stored charge's outcome, reference and amount; never seen; or,
    when the look-up itself fails, still unknown."""
    simulator.decline_until(
        67, (datetime.now(UTC) + timedelta(hours=1)).isoformat(), code="insufficient_funds"
    )
    gateway = HttpPaymentGateway(simulator.url, max_connections=4, read_timeout=1.0)
    try:
        made = await charge(gateway, "inv-30-try-0")
        await charge(gateway, "inv-31-try-0", customer=67)
        charged = await gateway.lookup("inv-30-try-0")
        declined = await gateway.lookup("inv-31-try-0")
        never = await gateway.lookup("inv-32-try-0")
        simulator.config(lookup_error_rate=1.0)
        failed = await gateway.lookup("inv-30-try-0")
        simulator.config(lookup_error_rate=0.0, latency_min_ms=2000, latency_max_ms=2000)
        slow = await gateway.lookup("inv-30-try-0")
    finally:
        await gateway.aclose()
    assert (charged.outcome, charged.gateway_reference, charged.amount, charged.currency) == (
        ChargeOutcome.SUCCESS,
        made.gateway_reference,
        990,
        "EUR",
    )
    assert charged.customer_id == 1 and not charged.never_seen
    assert (declined.outcome, declined.decline_code) == (
        ChargeOutcome.DECLINED,
        "insufficient_funds",
    )
    assert never.never_seen and never.http_status == 404 and never.error is None
    assert (failed.outcome, failed.http_status, failed.error) == (
        ChargeOutcome.UNKNOWN,
        503,
        "lookup http 503",
    )
    assert slow.outcome == ChargeOutcome.UNKNOWN and slow.http_status is None
    assert slow.error is not None and slow.error.startswith("lookup timeout")
    summary = simulator.summary()
    assert (summary["charges_succeeded"], summary["declines"], summary["replays"]) == (1, 1, 0)
