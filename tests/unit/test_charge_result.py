from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from billing_core.domain.charge_result import (
    NOTHING_CHARGED,
    ChargeOutcome,
    GatewayReport,
    KeyHistory,
    RecordOutcome,
    ResultEffect,
    apply_result,
    classify,
    classify_lookup,
    idempotency_key,
)
from billing_core.domain.dunning import DunningPolicy
from billing_core.domain.errors import InvalidPolicy, NaiveDatetime
from billing_core.domain.events import EventType
from billing_core.domain.invoice import InvoiceState, InvoiceStatus
from billing_core.domain.refund import RefundReason
from billing_core.domain.subscription import SubscriptionState, SubscriptionStatus
from billing_core.gateway import ChargeResult, LookupResult

NOW = datetime(2026, 12, 1, tzinfo=UTC)
S, D, U = ChargeOutcome.SUCCESS, ChargeOutcome.DECLINED, ChargeOutcome.UNKNOWN


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (200, {"status": "succeeded", "id": "ch_1"}, (S, None)),
        (
            402,
            {"status": "declined", "declineCode": "insufficient_funds"},
            (D, "insufficient_funds"),
        ),
        (402, {"status": "declined", "declineCode": "expired_card"}, (D, "expired_card")),
        (402, None, (D, "card_declined")),
        (200, {"status": "declined", "declineCode": "do_not_honor"}, (D, "do_not_honor")),
        (400, {"declineCode": "card_declined"}, (D, "card_declined")),
        (None, None, (U, None)),
        (500, {"error": "boom"}, (U, None)),
        (503, None, (U, None)),
        (429, {"declineCode": "card_declined"}, (U, None)),
        (200, {"weird": True}, (U, None)),
        (200, None, (U, None)),
        (409, {"error": "key reused"}, (U, None)),
        (201, {"status": "succeeded"}, (S, None)),
        (200, {"status": "pending"}, (U, None)),
        (200, {"status": "declined"}, (U, None)),  # a decline without a code is not clear
        (402, {"status": "declined", "decline_code": "lost_card"}, (D, "lost_card")),
        (402, {"declineCode": 7}, (D, "card_declined")),
        (400, {"declineCode": "something_else"}, (U, None)),
        (422, {"declineCode": "expired_card"}, (D, "expired_card")),
        (500, {"status": "succeeded"}, (U, None)),
        (502, {"declineCode": "card_declined"}, (U, None)),
        (504, None, (U, None)),
        (500, {"type": "about:blank", "status": 500, "title": "boom"}, (U, None)),
        (302, {"status": "succeeded"}, (U, None)),
    ],
)
def test_classify(
    status: int | None, body: dict[str, object] | None, expected: tuple[ChargeOutcome, str | None]
) -> None:
    assert classify(status, body) == expected


def test_idempotency_key_is_per_attempt() -> None:
    assert idempotency_key(42, 0) == "inv-42-try-0"
    assert idempotency_key(42, 3) == "inv-42-try-3"
    assert idempotency_key(42, 3, "prod-") == "prod-inv-42-try-3"


def sub_state(status: SubscriptionStatus = SubscriptionStatus.ACTIVE) -> SubscriptionState:
    return SubscriptionState(
        id=3, status=status, cancel_at_period_end=False, plan_code="BASIC_MONTHLY", version=4
    )


def open_invoice(
    attempt_count: int = 0, status: InvoiceStatus = InvoiceStatus.OPEN
) -> InvoiceState:
    return InvoiceState(
        id=9,
        status=status,
        attempt_count=attempt_count,
        amount=990,
        currency="EUR",
        next_attempt_at=NOW,
    )


def report(outcome: ChargeOutcome, attempt: int = 0, *, webhook: bool = False) -> GatewayReport:
    """A webhook says what it charged (the invoice's amount and currency, its customer 7)."""
    return GatewayReport(
        attempt_number=attempt,
        outcome=outcome,
        from_webhook=webhook,
        idempotency_key=idempotency_key(9, attempt),
        decline_code="card_declined" if outcome == D else None,
        gateway_reference="ch_1" if outcome == S else None,
        amount=990 if webhook else None,
        currency="EUR" if webhook else None,
        customer_id=7 if webhook else None,
    )


SENT = KeyHistory(sent=True)  # the attempt's call was made (its answer recorded, or leased)


def apply(
    outcome: ChargeOutcome,
    count: int = 0,
    *,
    attempt: int | None = None,
    webhook: bool = False,
    invoice_status: InvoiceStatus = InvoiceStatus.OPEN,
    status: SubscriptionStatus = SubscriptionStatus.ACTIVE,
    others: int = 0,
    now: datetime = NOW,
    rng: random.Random | None = None,
    policy: DunningPolicy = DunningPolicy(),  # noqa: B008
    history: KeyHistory = SENT,
    void_requested: bool = False,
) -> ResultEffect:
    return apply_result(
        replace(open_invoice(count, invoice_status), void_requested=void_requested),
        sub_state(status),
        report(outcome, count if attempt is None else attempt, webhook=webhook),
        other_invoices_in_dunning=others,
        now=now,
        rng=rng or random.Random(1),
        policy=policy,
        key_history=history,
    )


def types(effect: ResultEffect) -> list[EventType]:
    return [e.type for e in effect.events]


def test_success_pays_and_keeps_the_count() -> None:
    e = apply(S, 2)
    assert e.outcome == RecordOutcome.APPLIED
    assert (e.invoice.status, e.invoice.attempt_count, e.invoice.next_attempt_at) == (
        InvoiceStatus.PAID,
        2,
        None,
    )
    assert (e.invoice.paid_at, e.invoice.closed_at) == (NOW, NOW)
    assert types(e) == [EventType.INVOICE_PAID]
    assert e.events[0].payload["amount"] == 990
    assert e.subscription == sub_state() and not e.void_other_open_invoices


def test_unknown_keeps_the_count_so_the_key_is_reused() -> None:
    e = apply(U, 1)
    assert e.invoice.status == InvoiceStatus.OPEN
    assert e.invoice.attempt_count == 1
    assert e.invoice.next_attempt_at == NOW + timedelta(minutes=15)
    assert e.events == [] and e.subscription == sub_state()


def test_full_dunning_sequence_to_failure() -> None:
    rng = random.Random(3)
    inv, state, now = open_invoice(), sub_state(), NOW
    seen = []
    while True:
        e = apply_result(
            inv, state, report(D, inv.attempt_count), other_invoices_in_dunning=0, now=now, rng=rng
        )
        seen.append((e.invoice.status, e.invoice.attempt_count, e.subscription.status, types(e)))
        if e.invoice.next_attempt_at is None:
            assert e.void_other_open_invoices
            break
        assert e.invoice.next_attempt_at >= now + timedelta(days=1)
        inv, state, now = e.invoice, e.subscription, e.invoice.next_attempt_at
    OPEN, FAILED = InvoiceStatus.OPEN, InvoiceStatus.FAILED
    PAST, CANCELED = SubscriptionStatus.PAST_DUE, SubscriptionStatus.CANCELED
    FAIL, PD, SC = (
        EventType.PAYMENT_FAILED,
        EventType.SUBSCRIPTION_PAST_DUE,
        EventType.SUBSCRIPTION_CANCELED,
    )
    assert seen == [
        (OPEN, 1, PAST, [FAIL, PD]),
        (OPEN, 2, PAST, [FAIL]),
        (OPEN, 3, PAST, [FAIL]),
        (FAILED, 4, CANCELED, [FAIL, SC]),
    ]
    assert e.events[-1].payload["reason"] == "nonpayment"


def test_apply_follows_a_configured_policy() -> None:
    policy = DunningPolicy(
        delays=(timedelta(minutes=1),), jitter=timedelta(0), unknown_retry=timedelta(seconds=30)
    )
    assert apply(D, 0, policy=policy).invoice.next_attempt_at == NOW + timedelta(minutes=1)
    assert apply(D, 1, policy=policy).invoice.status == InvoiceStatus.FAILED
    assert apply(U, 0, policy=policy).invoice.next_attempt_at == NOW + timedelta(seconds=30)


@pytest.mark.parametrize(
    ("outcome", "count", "status", "new_count", "sub_status", "retry"),
    [
        (S, 0, InvoiceStatus.PAID, 0, SubscriptionStatus.ACTIVE, False),
        (S, 3, InvoiceStatus.PAID, 3, SubscriptionStatus.ACTIVE, False),
        (D, 0, InvoiceStatus.OPEN, 1, SubscriptionStatus.PAST_DUE, True),
        (D, 2, InvoiceStatus.OPEN, 3, SubscriptionStatus.PAST_DUE, True),
        (D, 3, InvoiceStatus.FAILED, 4, SubscriptionStatus.CANCELED, False),
        (D, 4, InvoiceStatus.FAILED, 5, SubscriptionStatus.CANCELED, False),
        (U, 0, InvoiceStatus.OPEN, 0, SubscriptionStatus.ACTIVE, True),
        (U, 3, InvoiceStatus.OPEN, 3, SubscriptionStatus.ACTIVE, True),
    ],
)
def test_apply_table(
    outcome: ChargeOutcome,
    count: int,
    status: InvoiceStatus,
    new_count: int,
    sub_status: SubscriptionStatus,
    retry: bool,
) -> None:
    e = apply(outcome, count, rng=random.Random(2))
    assert (e.invoice.status, e.invoice.attempt_count, e.subscription.status) == (
        status,
        new_count,
        sub_status,
    )
    assert (e.invoice.next_attempt_at is not None) == retry
    if e.invoice.next_attempt_at is not None:
        assert e.invoice.next_attempt_at > NOW
    assert e.subscription.version == 4 + (sub_status != SubscriptionStatus.ACTIVE)


@pytest.mark.parametrize(
    "invoice_status", [InvoiceStatus.PAID, InvoiceStatus.FAILED, InvoiceStatus.VOID]
)
@pytest.mark.parametrize("outcome", [S, D, U])
def test_a_settled_invoice_never_changes(
    invoice_status: InvoiceStatus, outcome: ChargeOutcome
) -> None:
    """Its state never changes; money taken for a FAILED/VOID invoice is refunded; a PAID
    invoice's success reported again (its key succeeded before) is a replay, nothing more."""
    seen = KeyHistory(succeeded_before=True)
    e = apply(outcome, 1, invoice_status=invoice_status, history=seen)
    assert e.invoice == open_invoice(1, invoice_status)
    assert e.subscription == sub_state()
    if outcome == S and invoice_status != InvoiceStatus.PAID:
        assert (e.outcome, e.refund, e.events, e.reconciliation) == (
            RecordOutcome.REFUND,
            RefundReason.CHARGED_CLOSED_INVOICE,
            [],
            None,
        )
    elif outcome == U and invoice_status == InvoiceStatus.VOID:  # voided during its call
        assert e.outcome == RecordOutcome.RECONCILIATION
        assert types(e) == [EventType.PAYMENT_RECONCILIATION_NEEDED]
        assert e.reconciliation is not None and e.reconciliation.startswith("uncertain_on_void")
    else:
        assert (e.outcome, e.events, e.refund, e.reconciliation) == (
            RecordOutcome.ALREADY_SETTLED,
            [],
            None,
            None,
        )


def test_a_second_success_for_a_paid_invoice_under_another_key_is_refunded() -> None:
    e = apply(S, 1, invoice_status=InvoiceStatus.PAID, history=KeyHistory(succeeded_before=False))
    assert (e.outcome, e.refund, e.events) == (
        RecordOutcome.REFUND,
        RefundReason.DUPLICATE_CHARGE,
        [],
    )
    assert e.invoice == open_invoice(1, InvoiceStatus.PAID)
    # A decline or an uncertain answer for a PAID invoice is nothing to give back.
    for other in (D, U):
        assert apply(other, 1, invoice_status=InvoiceStatus.PAID).refund is None


@pytest.mark.parametrize("attempt", [0, 1])
@pytest.mark.parametrize("webhook", [False, True])
def test_a_success_for_an_invoice_canceled_during_its_call_voids_it_and_refunds(
    attempt: int, webhook: bool
) -> None:
    e = apply(S, 1, attempt=attempt, webhook=webhook, void_requested=True)
    assert (e.outcome, e.refund) == (RecordOutcome.REFUND, RefundReason.CANCELED_IN_FLIGHT)
    assert (
        e.invoice.status,
        e.invoice.next_attempt_at,
        e.invoice.closed_at,
        e.invoice.paid_at,
    ) == (
        InvoiceStatus.VOID,
        None,
        NOW,
        None,
    )
    assert types(e) == [EventType.INVOICE_VOIDED]
    assert e.subscription == sub_state()


@pytest.mark.parametrize("lookup", [False, True])
def test_a_decline_of_the_call_in_flight_or_no_charge_under_its_key_voids_a_canceled_invoice(
    lookup: bool,
) -> None:
    """The call's decline, or a look-up finding no charge under the key (``NOTHING_CHARGED``):
    nothing was taken, so the requested void is done; no dunning, no PaymentFailed."""
    said = replace(
        report(D, 1), from_lookup=lookup, decline_code=NOTHING_CHARGED if lookup else "x"
    )
    e = apply_result(
        replace(open_invoice(1), void_requested=True),
        sub_state(),
        said,
        other_invoices_in_dunning=0,
        now=NOW,
        rng=random.Random(1),
    )
    assert (e.outcome, e.refund, e.invoice.status, e.invoice.attempt_count) == (
        RecordOutcome.APPLIED,
        None,
        InvoiceStatus.VOID,
        1,
    )
    assert types(e) == [EventType.INVOICE_VOIDED]


def test_an_uncertain_answer_of_the_call_in_flight_keeps_the_void_requested_for_a_look_up() -> None:
    """The card may have been charged: the invoice stays OPEN with its void requested and comes
    due again after ``unknown_retry``, when the collector looks the key up instead of calling."""
    policy = DunningPolicy()
    e = apply(U, 1, void_requested=True, policy=policy)
    assert (e.outcome, e.refund, e.events) == (RecordOutcome.APPLIED, None, [])
    assert e.invoice == replace(
        open_invoice(1), void_requested=True, next_attempt_at=NOW + policy.unknown_retry
    )


def test_a_canceled_invoice_whose_answers_stay_uncertain_is_voided_for_a_person_to_check() -> None:
    """Past the bound the cancel is done (VOID, its credit back) rather than left OPEN for
    ever, and a reconciliation item asks a person whether money was taken under the key."""
    policy = DunningPolicy()
    spent = KeyHistory(uncertain_answers=policy.unknown_max_retries, first_used_at=NOW)
    e = apply(U, 1, void_requested=True, policy=policy, history=spent)
    assert (e.outcome, e.invoice.status, e.invoice.next_attempt_at, e.refund) == (
        RecordOutcome.RECONCILIATION,
        InvoiceStatus.VOID,
        None,
        None,
    )
    assert types(e) == [EventType.INVOICE_VOIDED, EventType.PAYMENT_RECONCILIATION_NEEDED]
    assert e.reconciliation is not None and e.reconciliation.startswith("unknown_unresolved")


def test_a_refusal_of_the_call_in_flight_voids_a_canceled_invoice() -> None:
    """A 4xx no retry changes charged nothing: the requested void is done."""
    refused = replace(report(U, 1), rejected_because="http 409: key reused")
    e = apply_result(
        replace(open_invoice(1), void_requested=True),
        sub_state(),
        refused,
        other_invoices_in_dunning=0,
        now=NOW,
        rng=random.Random(1),
    )
    assert (e.outcome, e.invoice.status) == (RecordOutcome.APPLIED, InvoiceStatus.VOID)


@pytest.mark.parametrize(
    ("outcome", "attempt", "webhook"), [(D, 0, False), (U, 0, False), (U, 1, True), (D, 0, True)]
)
def test_other_attempts_results_leave_a_requested_void_to_the_call_in_flight(
    outcome: ChargeOutcome, attempt: int, webhook: bool
) -> None:
    e = apply(outcome, 1, attempt=attempt, webhook=webhook, void_requested=True)
    assert (e.outcome, e.invoice, e.events) == (
        RecordOutcome.STALE_ATTEMPT,
        replace(open_invoice(1), void_requested=True),
        [],
    )


def test_a_mismatched_success_on_a_canceled_invoice_is_for_a_person_not_a_refund() -> None:
    mismatched = replace(report(S, 5), amount=1)
    e = apply_result(
        replace(open_invoice(1), void_requested=True),
        sub_state(),
        mismatched,
        other_invoices_in_dunning=0,
        now=NOW,
        rng=random.Random(1),
    )
    assert (e.outcome, e.refund, e.invoice.status) == (
        RecordOutcome.MISMATCH,
        None,
        InvoiceStatus.OPEN,
    )
    assert e.reconciliation is not None and e.reconciliation.startswith("report_mismatch: ")


@pytest.mark.parametrize(
    ("outcome", "attempt", "webhook", "expected"),
    [
        (D, 0, False, RecordOutcome.STALE_ATTEMPT),  # an older attempt's decline
        (U, 0, False, RecordOutcome.STALE_ATTEMPT),
        (D, 0, True, RecordOutcome.STALE_ATTEMPT),
        (U, 2, True, RecordOutcome.STALE_ATTEMPT),  # a webhook's UNKNOWN is only recorded
        (S, 0, True, RecordOutcome.APPLIED),  # money taken by any attempt pays the invoice
        (S, 0, False, RecordOutcome.APPLIED),
        (D, 2, True, RecordOutcome.APPLIED),
    ],
)
def test_results_of_other_attempts(
    outcome: ChargeOutcome, attempt: int, webhook: bool, expected: RecordOutcome
) -> None:
    e = apply(outcome, 2, attempt=attempt, webhook=webhook)
    assert e.outcome == expected
    if expected == RecordOutcome.STALE_ATTEMPT:
        assert (e.invoice, e.subscription, e.events) == (open_invoice(2), sub_state(), [])


@pytest.mark.parametrize(("others", "reactivated"), [(0, True), (1, False)])
def test_a_payment_reactivates_a_past_due_subscription_once_nothing_else_is_in_dunning(
    others: int, reactivated: bool
) -> None:
    e = apply(S, 1, status=SubscriptionStatus.PAST_DUE, others=others)
    expected = SubscriptionStatus.ACTIVE if reactivated else SubscriptionStatus.PAST_DUE
    assert e.subscription.status == expected
    assert types(e) == [EventType.INVOICE_PAID] + (
        [EventType.SUBSCRIPTION_REACTIVATED] if reactivated else []
    )


def test_a_decline_for_a_canceled_subscription_changes_the_invoice_only() -> None:
    e = apply(D, 3, status=SubscriptionStatus.CANCELED)
    assert e.invoice.status == InvoiceStatus.FAILED
    assert e.subscription == sub_state(SubscriptionStatus.CANCELED)
    assert types(e) == [EventType.PAYMENT_FAILED] and not e.void_other_open_invoices


def test_the_dunning_sequence_reuses_no_key_and_ends_in_cancel() -> None:
    """Declines move the key forward; an uncertain answer in between keeps it."""
    rng, now = random.Random(5), NOW
    inv, state = open_invoice(), sub_state()
    keys: list[str] = []
    for outcome in (D, U, D, U, U, D, D):
        keys.append(idempotency_key(inv.id, inv.attempt_count))
        e = apply_result(
            inv,
            state,
            report(outcome, inv.attempt_count),
            other_invoices_in_dunning=0,
            now=now,
            rng=rng,
        )
        if outcome == U:
            assert e.invoice.attempt_count == inv.attempt_count
            assert e.invoice.next_attempt_at == now + timedelta(minutes=15)
        else:
            assert e.invoice.attempt_count == inv.attempt_count + 1
        inv, state = e.invoice, e.subscription
        if inv.next_attempt_at is None:
            assert (inv.status, inv.attempt_count, state.status) == (
                InvoiceStatus.FAILED,
                4,
                SubscriptionStatus.CANCELED,
            )
            break
        now = inv.next_attempt_at
    assert keys == [
        "inv-9-try-0",
        "inv-9-try-1",
        "inv-9-try-1",
        "inv-9-try-2",
        "inv-9-try-2",
        "inv-9-try-2",
        "inv-9-try-3",
    ]


def test_apply_refuses_naive_now() -> None:
    with pytest.raises(NaiveDatetime):
        apply(U, 0, now=datetime(2026, 12, 1))


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"amount": 1}, "amount 1 is not the invoice's 990"),
        ({"currency": "USD"}, "currency USD is not the invoice's EUR"),
        ({"customer_id": 8}, "customer 8 is not the invoice's 7"),
    ],
)
@pytest.mark.parametrize("outcome", [S, D])
def test_a_report_that_does_not_match_the_invoice_is_never_applied(
    changes: dict[str, object], why: str, outcome: ChargeOutcome
) -> None:
    """A valid signature proves who sent a webhook, not that it describes this invoice."""
    invoice = replace(open_invoice(), customer_id=7)
    sent = replace(report(outcome, 0, webhook=True), **changes)  # type: ignore[arg-type]
    e = apply_result(
        invoice,
        sub_state(),
        sent,
        other_invoices_in_dunning=0,
        now=NOW,
        rng=random.Random(1),
        key_history=SENT,
    )
    assert (e.outcome, e.invoice, e.subscription) == (RecordOutcome.MISMATCH, invoice, sub_state())
    if outcome == S:  # money may have been taken: a person must look
        [needed] = e.events
        assert needed.type == EventType.PAYMENT_RECONCILIATION_NEEDED
        assert why in str(needed.payload["reason"])
    else:
        assert e.events == []


def test_a_report_that_matches_in_every_field_is_applied() -> None:
    invoice = replace(open_invoice(), customer_id=7)
    e = apply_result(
        invoice,
        sub_state(),
        report(S, 0, webhook=True),
        other_invoices_in_dunning=0,
        now=NOW,
        rng=random.Random(1),
        key_history=SENT,
    )
    assert (e.outcome, e.invoice.status) == (RecordOutcome.APPLIED, InvoiceStatus.PAID)


@pytest.mark.parametrize(
    ("attempt", "history", "changes", "why"),
    [
        (1, KeyHistory(), {}, "attempt 1 was never sent (at 1)"),
        (0, KeyHistory(), {}, "attempt 0 was never sent (at 1)"),
        (1, SENT, {"amount": None}, "a success that names no amount"),
        (
            1,
            SENT,
            {"currency": None, "customer_id": None},
            "a success that names no currency, customer",
        ),
    ],
)
def test_a_webhooks_success_pays_only_an_attempt_sent_not_declined_and_fully_stated(
    attempt: int, history: KeyHistory, changes: dict[str, object], why: str
) -> None:
    """In dunning at attempt 1: a success for it before its call was made, for the declined
    attempt 0, or one that does not say what it charged, is an item for a person, not a
    payment."""
    invoice = open_invoice(1)
    said = replace(report(S, attempt, webhook=True), **changes)  # type: ignore[arg-type]
    e = apply_result(
        invoice,
        sub_state(SubscriptionStatus.PAST_DUE),
        said,
        other_invoices_in_dunning=0,
        now=NOW,
        rng=random.Random(1),
        key_history=history,
    )
    assert (e.outcome, e.invoice) == (RecordOutcome.MISMATCH, invoice)
    assert e.reconciliation == f"report_mismatch: {why}"
    assert types(e) == [EventType.PAYMENT_RECONCILIATION_NEEDED]


@pytest.mark.parametrize("webhook", [True, False])
def test_a_success_under_a_declined_key_holds_the_open_invoice_for_a_person(webhook: bool) -> None:
    """In dunning at attempt 1, attempt 0 declined to our own call: a success reported for
    attempt 0 pays nothing, and no next attempt is made by itself (it could charge twice)."""
    declined = KeyHistory(sent=True, declined_before=True)
    e = apply(S, 1, attempt=0, webhook=webhook, history=declined)
    reason = "report_mismatch: attempt 0 was declined, and a success is reported for it"
    assert (e.outcome, e.reconciliation) == (RecordOutcome.MISMATCH, reason)
    assert e.invoice == replace(open_invoice(1), next_attempt_at=None)
    assert types(e) == [EventType.PAYMENT_RECONCILIATION_NEEDED]


def test_a_success_under_a_declined_key_for_a_settled_invoice_is_refunded() -> None:
    declined = KeyHistory(sent=True, declined_before=True)
    e = apply(S, 1, attempt=0, webhook=True, invoice_status=InvoiceStatus.PAID, history=declined)
    assert (e.outcome, e.refund) == (RecordOutcome.REFUND, RefundReason.DUPLICATE_CHARGE)


def test_a_webhooks_decline_of_an_attempt_never_sent_is_never_applied() -> None:
    e = apply(D, 1, webhook=True, history=KeyHistory())
    assert (e.outcome, e.invoice, e.events) == (RecordOutcome.MISMATCH, open_invoice(1), [])


def test_our_own_calls_answer_needs_no_other_evidence_of_being_sent() -> None:
    assert apply(S, 1, history=KeyHistory()).outcome == RecordOutcome.APPLIED


BOUNDED = DunningPolicy(unknown_max_retries=3, unknown_max_age=timedelta(hours=20))


@pytest.mark.parametrize(
    ("answers_before", "first_used_hours_ago", "held"),
    [
        (0, 0, False),
        (1, 1, False),
        (2, 1, True),  # the 3rd uncertain answer for the key
        (0, 19.9, False),
        (0, 20, True),  # the key is as old as the gateway may keep it
    ],
)
def test_uncertain_answers_are_retried_within_bounds_then_held_for_reconciliation(
    answers_before: int, first_used_hours_ago: float, held: bool
) -> None:
    history = KeyHistory(answers_before, NOW - timedelta(hours=first_used_hours_ago))
    e = apply_result(
        open_invoice(1),
        sub_state(),
        report(U, 1),
        other_invoices_in_dunning=0,
        now=NOW,
        rng=random.Random(1),
        policy=BOUNDED,
        key_history=history,
    )
    assert e.invoice.status == InvoiceStatus.OPEN and e.invoice.attempt_count == 1
    assert e.subscription == sub_state()
    if held:
        assert (e.outcome, e.invoice.next_attempt_at) == (RecordOutcome.RECONCILIATION, None)
        [needed] = e.events
        assert needed.type == EventType.PAYMENT_RECONCILIATION_NEEDED
        assert str(needed.payload["reason"]).startswith("unknown_unresolved: ")
        assert "inv-9-try-1" in str(needed.payload["reason"])
    else:
        assert e.outcome == RecordOutcome.APPLIED and e.events == []
        assert e.invoice.next_attempt_at == NOW + BOUNDED.unknown_retry


def test_the_uncertainty_bounds_must_be_positive() -> None:
    with pytest.raises(InvalidPolicy):
        DunningPolicy(unknown_max_retries=0)
    with pytest.raises(InvalidPolicy):
        DunningPolicy(unknown_max_age=timedelta(0))


def test_a_call_the_gateway_rejects_for_good_is_held_not_retried() -> None:
    sent = replace(report(U, 1), rejected_because="http 409: key reused with other parameters")
    e = apply_result(
        open_invoice(1),
        sub_state(),
        sent,
        other_invoices_in_dunning=0,
        now=NOW,
        rng=random.Random(1),
    )
    assert (e.outcome, e.invoice.status, e.invoice.next_attempt_at) == (
        RecordOutcome.RECONCILIATION,
        InvoiceStatus.OPEN,
        None,
    )
    [needed] = e.events
    assert (
        needed.payload["reason"] == "gateway_rejected: http 409: key reused with other parameters"
    )


@pytest.mark.parametrize(
    ("status", "rejected", "unauthorized"),
    [
        (400, True, False),
        (404, True, False),
        (409, True, False),
        (422, True, False),
        (401, False, True),
        (403, False, True),
        (429, False, False),
        (500, False, False),
        (None, False, False),
    ],
)
def test_which_gateway_answers_are_refusals_for_good(
    status: int | None, rejected: bool, unauthorized: bool
) -> None:
    result = ChargeResult(ChargeOutcome.UNKNOWN, http_status=status)
    assert (result.rejected, result.unauthorized) == (rejected, unauthorized)
    assert not ChargeResult(ChargeOutcome.DECLINED, "card_declined", http_status=402).rejected


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (200, {"status": "succeeded", "id": "ch_1"}, (S, None)),
        (200, {"status": "declined", "declineCode": "expired_card"}, (D, "expired_card")),
        (404, {"title": "No such charge"}, (None, None)),  # never seen: nothing charged
        (404, None, (None, None)),
        (409, {"title": "Idempotency key in use"}, (U, None)),  # still being processed
        (200, {"status": "declined"}, (U, None)),
        (200, {"status": "pending"}, (U, None)),
        (200, None, (U, None)),
        (402, {"status": "declined", "declineCode": "card_declined"}, (U, None)),
        (429, None, (U, None)),
        (500, {"status": "succeeded"}, (U, None)),
        (503, None, (U, None)),
        (401, None, (U, None)),
        (None, None, (U, None)),
    ],
)
def test_classify_lookup(
    status: int | None,
    body: dict[str, object] | None,
    expected: tuple[ChargeOutcome | None, str | None],
) -> None:
    """Only a stored charge says what happened, and only a 404 says nothing was charged;
    everything else leaves the key uncertain."""
    assert classify_lookup(status, body) == expected


def test_a_lookup_result_says_never_seen_only_when_the_gateway_has_no_such_key() -> None:
    assert LookupResult(None, http_status=404).never_seen
    assert not LookupResult(U, http_status=503).never_seen
    assert LookupResult(U, http_status=401).unauthorized
    assert LookupResult(U, http_status=429).rate_limited


def lookup_report(outcome: ChargeOutcome, **changes: object) -> GatewayReport:
    sent = replace(report(outcome, 1), from_lookup=True)
    return replace(sent, **changes)  # type: ignore[arg-type]


def test_a_lookup_success_pays_the_invoice_and_is_recorded_as_a_lookup() -> None:
    sent = lookup_report(S, amount=990, currency="EUR", customer_id=7)
    e = apply_result(
        replace(open_invoice(1), customer_id=7),
        sub_state(),
        sent,
        other_invoices_in_dunning=0,
        now=NOW,
        rng=random.Random(1),
    )
    assert (e.outcome, e.invoice.status) == (RecordOutcome.APPLIED, InvoiceStatus.PAID)
    assert sent.source == "LOOKUP"
    assert report(S).source == "COLLECTOR" and report(S, webhook=True).source == "WEBHOOK"


def test_a_lookup_decline_runs_dunning_like_the_call_would_have() -> None:
    e = apply_result(
        open_invoice(1),
        sub_state(),
        lookup_report(D),
        other_invoices_in_dunning=0,
        now=NOW,
        rng=random.Random(1),
    )
    assert (e.outcome, e.invoice.attempt_count) == (RecordOutcome.APPLIED, 2)
    assert e.invoice.next_attempt_at is not None and e.invoice.next_attempt_at > NOW


def test_a_failed_lookup_is_one_more_uncertain_answer_within_the_same_bounds() -> None:
    history = KeyHistory(2, NOW - timedelta(hours=1))
    e = apply_result(
        open_invoice(1),
        sub_state(),
        lookup_report(U),
        other_invoices_in_dunning=0,
        now=NOW,
        rng=random.Random(1),
        policy=BOUNDED,
        key_history=history,
    )
    assert (e.outcome, e.invoice.next_attempt_at) == (RecordOutcome.RECONCILIATION, None)


def test_a_lookup_that_finds_our_key_charged_on_other_terms_holds_the_invoice() -> None:
    """No retry under that key can settle the invoice: held for a person, not re-looked-up
    every lease."""
    e = apply_result(
        open_invoice(1),
        sub_state(),
        lookup_report(S, amount=1),
        other_invoices_in_dunning=0,
        now=NOW,
        rng=random.Random(1),
    )
    assert (e.outcome, e.invoice.status, e.invoice.next_attempt_at) == (
        RecordOutcome.MISMATCH,
        InvoiceStatus.OPEN,
        None,
    )
    [needed] = e.events
    assert str(needed.payload["reason"]).startswith("report_mismatch: amount 1")


@pytest.mark.parametrize(
    ("changes", "attempt", "needs_a_person"),
    [
        ({}, 1, True),  # our call was at the gateway when the invoice was voided
        ({"from_lookup": True}, 1, True),
        ({"from_webhook": True}, 1, False),  # a webhook's UNKNOWN says nothing was decided
        ({"rejected_because": "http 409: key reused"}, 1, False),  # refused: nothing charged
        ({}, 0, False),  # an older attempt's: the current key settled it
    ],
)
def test_an_uncertain_answer_for_a_voided_invoice_asks_a_person(
    changes: dict[str, object], attempt: int, needs_a_person: bool
) -> None:
    """Nothing claims or looks up a VOID invoice: an uncertain answer of the call that was at
    the gateway when it was voided is the last word, and money may have been taken."""
    sent = replace(report(U, attempt), **changes)  # type: ignore[arg-type]
    voided = open_invoice(1, InvoiceStatus.VOID)
    e = apply_result(
        voided, sub_state(), sent, other_invoices_in_dunning=0, now=NOW, rng=random.Random(1)
    )
    assert (e.invoice, e.subscription) == (voided, sub_state())
    if needs_a_person:
        assert e.outcome == RecordOutcome.RECONCILIATION
        [needed] = e.events
        reason = str(needed.payload["reason"])
        assert reason.startswith(f"uncertain_on_void: {sent.idempotency_key}")
        assert needed.payload["invoiceStatus"] == "VOID"
    else:
        assert e.outcome != RecordOutcome.RECONCILIATION and e.events == []
