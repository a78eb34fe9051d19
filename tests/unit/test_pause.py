"""Pausing collection: the transitions, and the renewal planner's paused periods (no I/O)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from billing_core.domain import subscription as sub
from billing_core.domain.errors import IllegalTransition, SubscriptionCanceledError
from billing_core.domain.events import EventType
from billing_core.domain.invoice import InvoiceStatus
from billing_core.domain.renewal import DueSubscription, plan_renewal, renewal_events
from billing_core.domain.subscription import (
    InvalidPause,
    Pause,
    PauseBehavior,
    SubscriptionState,
    SubscriptionStatus,
)
from tests.unit.test_renewal_plan import due, paris

NOW = datetime(2026, 12, 3, tzinfo=UTC)
LATER = NOW + timedelta(days=20)
VOID, DRAFT = PauseBehavior.VOID, PauseBehavior.KEEP_AS_DRAFT


def state(status: SubscriptionStatus = SubscriptionStatus.ACTIVE) -> SubscriptionState:
    return SubscriptionState(
        id=7, status=status, cancel_at_period_end=False, plan_code="PRO_MONTHLY", version=3
    )


def test_pause_keeps_the_status_and_says_so() -> None:
    paused, events = sub.pause(state(), VOID, NOW, resumes_at=LATER)
    assert paused.status == SubscriptionStatus.ACTIVE and paused.version == 4
    assert paused.pause == Pause(VOID, NOW, LATER)
    (event,) = events
    assert event.type == EventType.SUBSCRIPTION_PAUSED
    assert event.payload == {
        "subscriptionId": 7,
        "behavior": "void",
        "pausedAt": "2026-12-03T00:00:00Z",
        "resumesAt": "2026-12-23T00:00:00Z",
        "changedAt": "2026-12-03T00:00:00Z",
    }


def test_the_same_pause_again_is_a_no_op_and_a_change_keeps_its_start() -> None:
    paused, _ = sub.pause(state(), VOID, NOW)
    assert sub.pause(paused, VOID, NOW + timedelta(hours=1)) == (paused, [])
    changed, events = sub.pause(paused, DRAFT, NOW + timedelta(hours=1), resumes_at=LATER)
    assert changed.pause == Pause(DRAFT, NOW, LATER) and changed.version == paused.version + 1
    assert events[0].payload["pausedAt"] == "2026-12-03T00:00:00Z"


def test_a_past_due_subscription_can_be_paused() -> None:
    paused, _ = sub.pause(state(SubscriptionStatus.PAST_DUE), DRAFT, NOW)
    assert paused.status == SubscriptionStatus.PAST_DUE and paused.pause is not None


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (SubscriptionStatus.CANCELED, SubscriptionCanceledError),
        (SubscriptionStatus.TRIALING, IllegalTransition),
    ],
)
def test_refused_when_canceled_or_trialing(
    status: SubscriptionStatus, error: type[Exception]
) -> None:
    with pytest.raises(error):
        sub.pause(state(status), VOID, NOW)


def test_resumes_at_must_be_in_the_future() -> None:
    with pytest.raises(InvalidPause):
        sub.pause(state(), VOID, NOW, resumes_at=NOW)


def test_resume_ends_the_pause_once() -> None:
    paused, _ = sub.pause(state(), VOID, NOW)
    resumed, events = sub.resume(paused, LATER)
    assert resumed.pause is None and resumed.version == paused.version + 1
    assert [e.payload for e in events] == [
        {
            "subscriptionId": 7,
            "pausedAt": "2026-12-03T00:00:00Z",
            "resumedAt": "2026-12-23T00:00:00Z",
            "automatic": False,
        }
    ]
    assert sub.resume(resumed, LATER) == (resumed, [])
    with pytest.raises(SubscriptionCanceledError):
        sub.resume(state(SubscriptionStatus.CANCELED), LATER)


def test_cancel_now_and_at_period_end_end_the_pause() -> None:
    paused, _ = sub.pause(state(), VOID, NOW)
    assert sub.cancel_now(paused, LATER)[0].pause is None
    flagged, _ = sub.schedule_cancel_at_period_end(paused, NOW)
    assert flagged.pause is not None
    assert sub.renew_or_cancel_at_period_end(flagged, LATER)[0].pause is None


def paused_due(
    behavior: PauseBehavior, resumes_at: datetime | None = None, *, credit: int = 0
) -> DueSubscription:
    d = due(credit=credit)
    pause = Pause(behavior, paris(2026, 1, 1), resumes_at)
    return replace(d, state=replace(d.state, pause=pause))


@pytest.mark.parametrize(
    ("behavior", "status"), [(VOID, InvoiceStatus.VOID), (DRAFT, InvoiceStatus.DRAFT)]
)
def test_paused_periods_still_renew_into_void_or_draft_invoices(
    behavior: PauseBehavior, status: InvoiceStatus
) -> None:
    now = paris(2026, 4, 1)
    plan = plan_renewal(paused_due(behavior, credit=500), now=now, max_periods=24)
    assert [i.period_index for i in plan.invoices] == [1, 2]  # every period, none skipped
    assert {i.status for i in plan.invoices} == {status}
    for invoice in plan.invoices:
        assert (invoice.subtotal, invoice.credit_applied, invoice.amount) == (990, 0, 990)
        assert invoice.next_attempt_at is None and invoice.paid_at is None
    assert plan.write.credit_balance == 500  # the credit waits for collected invoices
    assert plan.write.period_index == 2
    types = [e.type for e in renewal_events(plan, [31, 32])]
    if behavior == VOID:
        assert types == [EventType.INVOICE_CREATED, EventType.INVOICE_VOIDED] * 2
    else:
        assert types == [EventType.INVOICE_CREATED] * 2


def test_a_catch_up_across_resumes_at_pauses_only_the_periods_before_it() -> None:
    # Periods: Feb 28 -> Mar 31 (1), Mar 31 -> Apr 30 (2), Apr 30 -> May 31 (3).
    resumes_at = paris(2026, 4, 15)
    plan = plan_renewal(paused_due(VOID, resumes_at), now=paris(2026, 5, 1), max_periods=24)
    assert [(i.period_index, i.status) for i in plan.invoices] == [
        (1, InvoiceStatus.VOID),
        (2, InvoiceStatus.VOID),
        (3, InvoiceStatus.OPEN),
    ]
    assert plan.write.current_period_end > resumes_at  # the resume may now happen


def test_scheduling_a_plan_change_replaces_drops_and_refuses_when_canceled() -> None:
    scheduled, events = sub.schedule_plan_change(state(), "BASIC_MONTHLY", NOW)
    assert (scheduled.scheduled_plan_code, scheduled.version, events) == ("BASIC_MONTHLY", 4, [])
    assert sub.schedule_plan_change(scheduled, "BASIC_MONTHLY", NOW) == (scheduled, [])
    assert sub.schedule_plan_change(scheduled, "PRO_MONTHLY", NOW)[0].scheduled_plan_code is None
    assert sub.schedule_plan_change(scheduled, None, NOW)[0].scheduled_plan_code is None
    assert sub.schedule_plan_change(state(), None, NOW) == (state(), [])
    changed, (event,) = sub.change_plan(scheduled, "BUSINESS_MONTHLY", NOW)
    assert changed.scheduled_plan_code is None and event.payload["effective"] == "now"
    with pytest.raises(SubscriptionCanceledError):
        sub.schedule_plan_change(state(SubscriptionStatus.CANCELED), "BASIC_MONTHLY", NOW)
