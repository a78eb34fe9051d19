"""Every (state, action) pair of the subscription and invoice machines, legal and illegal."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace
from datetime import UTC, datetime

import pytest

from billing_core.domain import invoice as inv
from billing_core.domain import subscription as sub
from billing_core.domain.errors import (
    IllegalTransition,
    InvoiceNotPayable,
    SubscriptionCanceledError,
)
from billing_core.domain.events import EventType
from billing_core.domain.invoice import InvoiceState, InvoiceStatus
from billing_core.domain.subscription import SubscriptionState, SubscriptionStatus

NOW = datetime(2026, 12, 1, tzinfo=UTC)
A, P, C = SubscriptionStatus.ACTIVE, SubscriptionStatus.PAST_DUE, SubscriptionStatus.CANCELED
T = SubscriptionStatus.TRIALING

Action = Callable[[SubscriptionState], sub.Transition]
ACTIONS: dict[str, Action] = {
    "cancel_now": lambda s: sub.cancel_now(s, NOW),
    "cancel_at_period_end": lambda s: sub.schedule_cancel_at_period_end(s, NOW),
    "change_plan": lambda s: sub.change_plan(s, "PRO_MONTHLY", NOW, proration_due=100),
    "mark_past_due": lambda s: sub.mark_past_due(s, NOW, 9),
    "reactivate": lambda s: sub.reactivate(s, NOW, 9),
    "cancel_for_nonpayment": lambda s: sub.cancel_for_nonpayment(s, NOW),
    "renew": lambda s: sub.renew_or_cancel_at_period_end(s, NOW),
    "end_trial": lambda s: sub.end_trial(s, NOW),
    "resume_renewal": lambda s: sub.resume_renewal(s, NOW),
}

# (status, action) -> (new status, events) or the error raised
SUB_TABLE: dict[
    tuple[SubscriptionStatus, str], tuple[SubscriptionStatus, list[EventType]] | type[Exception]
] = {
    (A, "cancel_now"): (C, [EventType.SUBSCRIPTION_CANCELED]),
    (P, "cancel_now"): (C, [EventType.SUBSCRIPTION_CANCELED]),
    (C, "cancel_now"): (C, []),
    (A, "cancel_at_period_end"): (A, []),
    (P, "cancel_at_period_end"): (P, []),
    (C, "cancel_at_period_end"): (C, []),
    (A, "change_plan"): (A, [EventType.SUBSCRIPTION_PLAN_CHANGED]),
    (P, "change_plan"): (P, [EventType.SUBSCRIPTION_PLAN_CHANGED]),
    (C, "change_plan"): SubscriptionCanceledError,
    (A, "mark_past_due"): (P, [EventType.SUBSCRIPTION_PAST_DUE]),
    (P, "mark_past_due"): (P, []),
    (C, "mark_past_due"): SubscriptionCanceledError,
    (A, "reactivate"): (A, []),
    (P, "reactivate"): (A, [EventType.SUBSCRIPTION_REACTIVATED]),
    (C, "reactivate"): SubscriptionCanceledError,
    (A, "cancel_for_nonpayment"): (C, [EventType.SUBSCRIPTION_CANCELED]),
    (P, "cancel_for_nonpayment"): (C, [EventType.SUBSCRIPTION_CANCELED]),
    (C, "cancel_for_nonpayment"): (C, []),
    (A, "renew"): (A, []),
    (P, "renew"): IllegalTransition,
    (C, "renew"): IllegalTransition,
    # A trial: canceled for free, ended into ACTIVE, never past due (nothing was invoiced).
    (T, "cancel_now"): (C, [EventType.SUBSCRIPTION_CANCELED]),
    (T, "cancel_at_period_end"): (T, []),
    (T, "change_plan"): (T, [EventType.SUBSCRIPTION_PLAN_CHANGED]),
    (T, "mark_past_due"): IllegalTransition,
    (T, "reactivate"): IllegalTransition,
    (T, "cancel_for_nonpayment"): (C, [EventType.SUBSCRIPTION_CANCELED]),
    (T, "renew"): IllegalTransition,
    (T, "end_trial"): (A, [EventType.SUBSCRIPTION_TRIAL_ENDED]),
    (A, "end_trial"): IllegalTransition,
    (P, "end_trial"): IllegalTransition,
    (C, "end_trial"): IllegalTransition,
    # Undo a scheduled cancel (nothing scheduled here: unchanged; see the flag test below).
    (T, "resume_renewal"): (T, []),
    (A, "resume_renewal"): (A, []),
    (P, "resume_renewal"): (P, []),
    (C, "resume_renewal"): SubscriptionCanceledError,
}


def state(status: SubscriptionStatus, flag: bool = False) -> SubscriptionState:
    return SubscriptionState(
        id=7, status=status, cancel_at_period_end=flag, plan_code="BASIC_MONTHLY", version=3
    )


def test_the_table_covers_every_pair() -> None:
    assert set(SUB_TABLE) == {(s, a) for s in SubscriptionStatus for a in ACTIONS}


@pytest.mark.parametrize(("status", "action"), sorted(SUB_TABLE, key=str))
def test_subscription_transition(status: SubscriptionStatus, action: str) -> None:
    expected = SUB_TABLE[(status, action)]
    before = state(status)
    if isinstance(expected, type):
        with pytest.raises(expected):
            ACTIONS[action](before)
        return
    after, events = ACTIONS[action](before)
    new_status, types = expected
    assert after.status == new_status
    assert [e.type for e in events] == types
    assert all(e.subscription_id == 7 for e in events)
    changed = after != before
    assert after.version == before.version + (1 if changed else 0)


def test_renew_cancels_when_flagged() -> None:
    after, events = sub.renew_or_cancel_at_period_end(state(A, flag=True), NOW)
    assert after.status == C and after.canceled_at == NOW
    assert [e.type for e in events] == [EventType.SUBSCRIPTION_CANCELED]
    assert events[0].payload["reason"] == "period_end"


def test_cancel_at_period_end_sets_the_flag_once() -> None:
    after, _ = sub.schedule_cancel_at_period_end(state(A), NOW)
    assert after.cancel_at_period_end and after.version == 4
    again, events = sub.schedule_cancel_at_period_end(after, NOW)
    assert again == after and events == []


def test_same_plan_is_a_no_op() -> None:
    before = replace(state(A), plan_code="PRO_MONTHLY")
    assert sub.change_plan(before, "PRO_MONTHLY", NOW) == (before, [])


OP, PD, F, V = InvoiceStatus.OPEN, InvoiceStatus.PAID, InvoiceStatus.FAILED, InvoiceStatus.VOID
D = InvoiceStatus.DRAFT
LATER = datetime(2026, 12, 4, tzinfo=UTC)
INV_ACTIONS: dict[str, Callable[[InvoiceState], InvoiceState]] = {
    "pay": lambda i: inv.pay(i, NOW),
    "decline": lambda i: inv.decline(i, NOW, LATER),
    "decline_last": lambda i: inv.decline(i, NOW, None),
    "retry_later": lambda i: inv.retry_later(i, LATER),
    "void": lambda i: inv.void(i, NOW),
    "hold": inv.hold_for_reconciliation,
}


def invoice(status: InvoiceStatus) -> InvoiceState:
    return InvoiceState(id=5, status=status, attempt_count=1, amount=990, currency="EUR")


# (status, action) -> (status, attempt_count, next_attempt_at, paid_at, closed_at) or the error
INV_TABLE: dict[tuple[InvoiceStatus, str], tuple[object, ...] | type[Exception]] = {
    (OP, "pay"): (PD, 1, None, NOW, NOW),
    (PD, "pay"): (PD, 1, None, None, None),  # a replay: unchanged
    (F, "pay"): InvoiceNotPayable,
    (V, "pay"): InvoiceNotPayable,
    (OP, "decline"): (OP, 2, LATER, None, None),
    (PD, "decline"): IllegalTransition,
    (F, "decline"): IllegalTransition,
    (V, "decline"): IllegalTransition,
    (OP, "decline_last"): (F, 2, None, None, NOW),
    (PD, "decline_last"): IllegalTransition,
    (F, "decline_last"): IllegalTransition,
    (V, "decline_last"): IllegalTransition,
    (OP, "retry_later"): (OP, 1, LATER, None, None),
    (PD, "retry_later"): IllegalTransition,
    (F, "retry_later"): IllegalTransition,
    (V, "retry_later"): IllegalTransition,
    (OP, "void"): (V, 1, None, None, NOW),
    (PD, "void"): IllegalTransition,
    (F, "void"): IllegalTransition,
    (V, "void"): (V, 1, None, None, None),  # already void: unchanged
    (OP, "hold"): (OP, 1, None, None, None),  # OPEN, never tried again by itself
    (PD, "hold"): IllegalTransition,
    (F, "hold"): IllegalTransition,
    (V, "hold"): IllegalTransition,
    # A paused period's DRAFT is never collected: nothing moves it.
    (D, "pay"): InvoiceNotPayable,
    (D, "decline"): IllegalTransition,
    (D, "decline_last"): IllegalTransition,
    (D, "retry_later"): IllegalTransition,
    (D, "void"): IllegalTransition,
    (D, "hold"): IllegalTransition,
}


def test_invoice_table_covers_every_pair() -> None:
    assert set(INV_TABLE) == {(s, a) for s in InvoiceStatus for a in INV_ACTIONS}


@pytest.mark.parametrize(("status", "action"), sorted(INV_TABLE, key=str))
def test_invoice_transition(status: InvoiceStatus, action: str) -> None:
    expected = INV_TABLE[(status, action)]
    before = invoice(status)
    if isinstance(expected, type):
        with pytest.raises(expected):
            INV_ACTIONS[action](before)
        return
    after = INV_ACTIONS[action](before)
    assert (
        after.status,
        after.attempt_count,
        after.next_attempt_at,
        after.paid_at,
        after.closed_at,
    ) == expected
    assert (after.id, after.amount, after.currency) == (before.id, before.amount, before.currency)


def test_a_void_gives_back_all_the_credit_the_invoice_consumed() -> None:
    assert inv.credit_returned_by_void(0) == 0
    assert inv.credit_returned_by_void(1355) == 1355
    with pytest.raises(ValueError):
        inv.credit_returned_by_void(-1)


def test_is_settled() -> None:
    assert not inv.is_settled("OPEN")
    assert all(inv.is_settled(s) for s in (PD, F, V, D))


@pytest.mark.parametrize("status", list(SubscriptionStatus))
@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_transitions_with_the_cancel_flag_set(status: SubscriptionStatus, action: str) -> None:
    before = state(status, flag=True)
    expected = SUB_TABLE[(status, action)]
    if (action, status) in (("renew", A), ("end_trial", T)):
        expected = (C, [EventType.SUBSCRIPTION_CANCELED])
    if isinstance(expected, type):
        with pytest.raises(expected):
            ACTIONS[action](before)
        return
    after, events = ACTIONS[action](before)
    assert (after.status, [e.type for e in events]) == expected
    assert after.version == before.version + (after != before)
    if after.status == C and status != C:
        assert after.canceled_at == NOW


def test_a_trial_ended_early_drops_a_scheduled_cancel() -> None:
    after, events = sub.end_trial(state(T, flag=True), NOW, early=True)
    assert (after.status, after.cancel_at_period_end) == (A, False)
    assert [e.type for e in events] == [EventType.SUBSCRIPTION_TRIAL_ENDED]
    assert events[0].payload["early"] is True


def test_a_trial_that_reaches_its_end_with_a_scheduled_cancel_cancels_free() -> None:
    after, [event] = sub.end_trial(state(T, flag=True), NOW)
    assert (after.status, after.canceled_at) == (C, NOW)
    assert event.payload["reason"] == "period_end"


@pytest.mark.parametrize("status", [T, A, P])
def test_resume_renewal_clears_a_scheduled_cancel(status: SubscriptionStatus) -> None:
    after, events = sub.resume_renewal(state(status, flag=True), NOW)
    assert (after.status, after.cancel_at_period_end, events) == (status, False, [])
    assert after.version == 4
    renewed, _ = sub.renew_or_cancel_at_period_end(replace(after, status=A), NOW)
    assert renewed.status == A


def test_cancel_now_records_the_reason() -> None:
    _, [by_customer] = sub.cancel_now(state(A), NOW)
    _, [by_dunning] = sub.cancel_for_nonpayment(state(P), NOW)
    assert by_customer.payload["reason"] == "customer_request"
    assert by_dunning.payload["reason"] == "nonpayment"


def test_renew_without_the_flag_bumps_the_version_only() -> None:
    before = state(A)
    after, events = sub.renew_or_cancel_at_period_end(before, NOW)
    assert after == replace(before, version=before.version + 1) and events == []


def test_transitions_do_not_mutate_their_input() -> None:
    before = state(P)
    snapshot = replace(before)
    for action in ACTIONS.values():
        try:
            action(before)
        except IllegalTransition:
            pass
    assert before == snapshot


@pytest.mark.parametrize(
    ("status", "handling"),
    [
        (OP, inv.SuccessHandling.PAY),
        (PD, inv.SuccessHandling.ALREADY_PAID),
        (F, inv.SuccessHandling.RECONCILE),
        (V, inv.SuccessHandling.RECONCILE),
    ],
)
def test_success_handling_by_invoice_status(
    status: InvoiceStatus, handling: inv.SuccessHandling
) -> None:
    assert inv.on_success(status) == handling
    assert inv.on_success(str(status)) == handling
    assert inv.is_settled(status) == (status != OP)


def test_invoice_kinds() -> None:
    assert [str(k) for k in inv.InvoiceKind] == ["RENEWAL", "PRORATION"]


def test_a_new_invoice_is_open_and_due_now_unless_credit_covers_it() -> None:
    now = datetime(2026, 12, 1, tzinfo=UTC)
    assert inv.opening(990, now) == inv.Opening(
        InvoiceStatus.OPEN, next_attempt_at=now, paid_at=None
    )
    assert inv.opening(0, now) == inv.Opening(InvoiceStatus.PAID, next_attempt_at=None, paid_at=now)
    with pytest.raises(ValueError):
        inv.opening(-1, now)


def test_a_renewal_keeps_every_field_of_the_state_but_the_version() -> None:
    """The renewal builds its next state field by field (the batch's hot path): a field added
    to SubscriptionState must be carried, as ``replace`` would."""
    at = datetime(2026, 3, 1, tzinfo=UTC)
    state = sub.SubscriptionState(
        id=9,
        status=sub.SubscriptionStatus.ACTIVE,
        cancel_at_period_end=False,
        plan_code="PRO_MONTHLY",
        version=4,
        canceled_at=at,
        pause=sub.Pause(sub.PauseBehavior.VOID, at, None),
        scheduled_plan_code="BASIC_MONTHLY",
    )
    assert [f.name for f in fields(sub.SubscriptionState)] == [
        "id", "status", "cancel_at_period_end", "plan_code", "version", "canceled_at", "pause",
        "scheduled_plan_code",
    ]  # fmt: skip
    renewed, events = sub.renew_or_cancel_at_period_end(state, at)
    assert renewed == replace(state, version=5)
    assert events == []
