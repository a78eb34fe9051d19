from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from billing_core.domain.charge_result import (
    AttemptDecision,
    ChargeOutcome,
    classify,
    decide,
    idempotency_key,
)
from billing_core.domain.dunning import DunningPolicy
from billing_core.domain.errors import NaiveDatetime
from billing_core.domain.invoice import InvoiceStatus

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


def test_success_pays_and_keeps_the_count() -> None:
    d = decide(S, 2, NOW, random.Random(1))
    assert (d.invoice_status, d.attempt_count, d.next_attempt_at, d.subscription_action) == (
        InvoiceStatus.PAID,
        2,
        None,
        "reactivate",
    )


def test_unknown_keeps_the_count_so_the_key_is_reused() -> None:
    d = decide(U, 1, NOW, random.Random(1))
    assert d.invoice_status == InvoiceStatus.OPEN
    assert d.attempt_count == 1
    assert d.next_attempt_at == NOW + timedelta(minutes=15)
    assert d.subscription_action == "none"


def test_full_dunning_sequence_to_failure() -> None:
    rng = random.Random(3)
    count, now, seen = 0, NOW, []
    while True:
        d = decide(D, count, now, rng)
        seen.append((d.invoice_status, d.attempt_count, d.subscription_action))
        if d.next_attempt_at is None:
            break
        assert d.next_attempt_at >= now + timedelta(days=1)
        count, now = d.attempt_count, d.next_attempt_at
    assert seen == [
        (InvoiceStatus.OPEN, 1, "past_due"),
        (InvoiceStatus.OPEN, 2, "past_due"),
        (InvoiceStatus.OPEN, 3, "past_due"),
        (InvoiceStatus.FAILED, 4, "cancel"),
    ]


def test_decide_follows_a_configured_policy() -> None:
    policy = DunningPolicy(
        delays=(timedelta(minutes=1),), jitter=timedelta(0), unknown_retry=timedelta(seconds=30)
    )
    assert decide(D, 0, NOW, random.Random(1), policy).next_attempt_at == NOW + timedelta(minutes=1)
    assert decide(D, 1, NOW, random.Random(1), policy).invoice_status == InvoiceStatus.FAILED
    assert decide(U, 0, NOW, random.Random(1), policy).next_attempt_at == NOW + timedelta(
        seconds=30
    )


def test_the_dunning_sequence_reuses_no_key_and_ends_in_cancel() -> None:
    """Declines move the key forward; an uncertain answer in between keeps it."""
    rng, now, count = random.Random(5), NOW, 0
    keys: list[str] = []
    actions: list[str] = []
    for outcome in (D, U, D, U, U, D, D):
        keys.append(idempotency_key(77, count))
        d = decide(outcome, count, now, rng)
        actions.append(d.subscription_action)
        if outcome == U:
            assert d.attempt_count == count and d.next_attempt_at == now + timedelta(minutes=15)
        else:
            assert d.attempt_count == count + 1
        count = d.attempt_count
        if d.next_attempt_at is None:
            assert d == AttemptDecision(InvoiceStatus.FAILED, 4, None, "cancel")
            break
        now = d.next_attempt_at
    assert keys == [
        "inv-77-try-0",
        "inv-77-try-1",
        "inv-77-try-1",
        "inv-77-try-2",
        "inv-77-try-2",
        "inv-77-try-2",
        "inv-77-try-3",
    ]
    assert actions == ["past_due", "none", "past_due", "none", "none", "past_due", "cancel"]


@pytest.mark.parametrize(
    ("outcome", "count", "status", "new_count", "action", "retry"),
    [
        (S, 0, InvoiceStatus.PAID, 0, "reactivate", False),
        (S, 3, InvoiceStatus.PAID, 3, "reactivate", False),
        (D, 0, InvoiceStatus.OPEN, 1, "past_due", True),
        (D, 2, InvoiceStatus.OPEN, 3, "past_due", True),
        (D, 3, InvoiceStatus.FAILED, 4, "cancel", False),
        (D, 4, InvoiceStatus.FAILED, 5, "cancel", False),
        (U, 0, InvoiceStatus.OPEN, 0, "none", True),
        (U, 3, InvoiceStatus.OPEN, 3, "none", True),
    ],
)
def test_decide_table(
    outcome: ChargeOutcome,
    count: int,
    status: InvoiceStatus,
    new_count: int,
    action: str,
    retry: bool,
) -> None:
    d = decide(outcome, count, NOW, random.Random(2))
    assert (d.invoice_status, d.attempt_count, d.subscription_action) == (status, new_count, action)
    assert (d.next_attempt_at is not None) == retry
    if d.next_attempt_at is not None:
        assert d.next_attempt_at > NOW


def test_decide_refuses_naive_now() -> None:
    with pytest.raises(NaiveDatetime):
        decide(U, 0, datetime(2026, 12, 1), random.Random(1))
