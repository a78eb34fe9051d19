"""The refund rules and the cancel of an invoice whose call may be in flight: pure domain."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from billing_core.domain import invoice as invoice_rules
from billing_core.domain.dunning import DunningPolicy
from billing_core.domain.errors import NaiveDatetime
from billing_core.domain.events import EventType
from billing_core.domain.invoice import InvoiceState, InvoiceStatus
from billing_core.domain.refund import (
    RefundAnswer,
    RefundEffect,
    RefundOutcome,
    RefundState,
    RefundStatus,
    apply_refund_answer,
    classify_refund,
    refund_key,
)

NOW = datetime(2026, 12, 5, 8, tzinfo=UTC)
RETRY = timedelta(minutes=1)
POLICY = DunningPolicy(unknown_retry=RETRY, unknown_max_retries=3)
OK, FAILED, UNKNOWN = RefundOutcome.SUCCEEDED, RefundOutcome.FAILED, RefundOutcome.UNKNOWN


def invoice(**changes: object) -> InvoiceState:
    base = InvoiceState(
        id=9, status=InvoiceStatus.OPEN, attempt_count=1, amount=990, currency="EUR",
        next_attempt_at=NOW + timedelta(minutes=2),
    )  # fmt: skip
    return replace(base, **changes)  # type: ignore[arg-type]


def test_a_cancel_voids_an_invoice_with_no_call_in_flight() -> None:
    after = invoice_rules.cancel(invoice(), NOW, call_in_flight=False)
    assert (after.status, after.next_attempt_at, after.closed_at, after.void_requested) == (
        InvoiceStatus.VOID,
        None,
        NOW,
        False,
    )


def test_a_cancel_during_a_call_only_requests_the_void() -> None:
    before = invoice()
    after = invoice_rules.cancel(before, NOW, call_in_flight=True)
    assert after == replace(before, void_requested=True)  # still OPEN, lease kept
    assert invoice_rules.cancel(after, NOW, call_in_flight=True) == after
    assert invoice_rules.cancel(after, NOW, call_in_flight=False) == after  # the call decides


@pytest.mark.parametrize("status", [InvoiceStatus.PAID, InvoiceStatus.FAILED, InvoiceStatus.VOID])
def test_a_cancel_leaves_a_settled_invoice_alone(status: InvoiceStatus) -> None:
    settled = invoice(status=status, next_attempt_at=None)
    assert invoice_rules.cancel(settled, NOW, call_in_flight=True) == settled
    assert invoice_rules.cancel(settled, NOW, call_in_flight=False) == settled


def test_refund_key_is_fixed_by_the_attempt_and_carries_the_prefix() -> None:
    assert refund_key(17) == "ref-17"
    assert refund_key(17, "prod-") == "prod-ref-17"


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (200, {"status": "succeeded", "id": "re_1"}, (OK, None)),
        (201, {"status": "succeeded"}, (OK, None)),
        (200, {"status": "failed", "detail": "card closed"}, (FAILED, "http 200: card closed")),
        (200, {"status": "pending"}, (UNKNOWN, None)),
        (200, None, (UNKNOWN, None)),
        (None, None, (UNKNOWN, None)),
        (404, {"detail": "no such charge"}, (FAILED, "http 404: no such charge")),
        (409, {"title": "Idempotency key reused"}, (FAILED, "http 409: Idempotency key reused")),
        (422, None, (FAILED, "http 422")),
        (401, {"detail": "revoked"}, (UNKNOWN, None)),
        (403, None, (UNKNOWN, None)),
        (429, {"detail": "slow down"}, (UNKNOWN, None)),
        (500, {"status": "succeeded"}, (UNKNOWN, None)),
        (503, None, (UNKNOWN, None)),
    ],
)
def test_classify_refund(
    status: int | None, body: dict[str, object] | None, expected: tuple[RefundOutcome, str | None]
) -> None:
    assert classify_refund(status, body) == expected


def requested(**changes: object) -> RefundState:
    base = RefundState(
        id=5, subscription_id=3, invoice_id=9, amount=990, currency="EUR",
        reason="canceled_in_flight", charge_reference="ch_1", idempotency_key="ref-41",
        status=RefundStatus.REQUESTED, next_attempt_at=NOW, requested_at=NOW - timedelta(hours=1),
    )  # fmt: skip
    return replace(base, **changes)  # type: ignore[arg-type]


def answer(
    outcome: RefundOutcome,
    refund: RefundState | None = None,
    *,
    gateway_reference: str | None = None,
    error: str | None = None,
) -> RefundEffect:
    return apply_refund_answer(
        refund or requested(),
        RefundAnswer(outcome, gateway_reference, error),
        now=NOW,
        policy=POLICY,
    )


def test_a_refund_that_succeeds_is_announced_once() -> None:
    e = answer(OK, gateway_reference="re_7")
    assert (e.refund.status, e.refund.gateway_reference, e.refund.completed_at) == (
        RefundStatus.SUCCEEDED,
        "re_7",
        NOW,
    )
    assert e.refund.next_attempt_at is None
    assert e.needs_reconciliation is None
    [event] = e.events
    assert event.type == EventType.PAYMENT_REFUNDED
    assert event.subscription_id == 3
    assert event.payload == {
        "subscriptionId": 3,
        "invoiceId": 9,
        "refundId": 5,
        "amount": 990,
        "currency": "EUR",
        "reason": "canceled_in_flight",
        "chargeReference": "ch_1",
        "gatewayReference": "re_7",
        "refundedAt": "2026-12-05T08:00:00Z",
    }
    # The same answer recorded again (a lease ran out meanwhile) changes nothing.
    again = answer(OK, e.refund, gateway_reference="re_7")
    assert (again.refund, again.events) == (e.refund, [])


def test_a_refused_refund_is_failed_and_goes_to_a_person() -> None:
    e = answer(FAILED, error="http 404: no such charge")
    assert (e.refund.status, e.refund.error, e.events) == (
        RefundStatus.FAILED,
        "http 404: no such charge",
        [],
    )
    assert e.needs_reconciliation == "refund_failed: http 404: no such charge"


def test_an_uncertain_answer_is_asked_again_with_the_same_key_then_given_up() -> None:
    first = answer(UNKNOWN, error="timeout: read")
    assert (first.refund.status, first.refund.next_attempt_at, first.refund.uncertain_answers) == (
        RefundStatus.REQUESTED,
        NOW + RETRY,
        1,
    )
    assert first.refund.idempotency_key == "ref-41"
    assert (first.events, first.needs_reconciliation) == ([], None)
    second = answer(UNKNOWN, first.refund)
    assert second.refund.status == RefundStatus.REQUESTED
    third = answer(UNKNOWN, second.refund)
    assert third.refund.status == RefundStatus.FAILED
    assert third.needs_reconciliation == (
        "refund_failed: unknown_unresolved: 3 uncertain answers for ref-41"
        " (requested 2026-12-05T07:00:00+00:00)"
    )


def test_an_uncertain_answer_for_a_key_older_than_the_gateway_keeps_it_goes_to_a_person() -> None:
    # One uncertain answer only, but the key was decided longer ago than the gateway keeps it:
    # a retry could be a second refund.
    old = requested(requested_at=NOW - POLICY.unknown_max_age)
    e = answer(UNKNOWN, old)
    assert (e.refund.status, e.refund.uncertain_answers) == (RefundStatus.FAILED, 1)
    assert e.needs_reconciliation is not None
    assert "1 uncertain answers for ref-41" in e.needs_reconciliation
    younger = answer(UNKNOWN, replace(old, requested_at=NOW - POLICY.unknown_max_age / 2))
    assert younger.refund.status == RefundStatus.REQUESTED


def test_refund_answers_need_an_aware_now() -> None:
    with pytest.raises(NaiveDatetime):
        apply_refund_answer(
            requested(),
            RefundAnswer(OK),
            now=datetime(2026, 12, 5),
            policy=POLICY,
        )
