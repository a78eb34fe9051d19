"""Cancel a subscription, now or at the end of its current period."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from billing_core.domain import subscription as sub_domain
from billing_core.repo import audit, outbox
from billing_core.repo import subscriptions as subscriptions_repo
from billing_core.usecases.voiding import void_open_invoices


async def cancel(
    session: AsyncSession,
    *,
    subscription_id: int,
    at_period_end: bool,
    now: datetime,
    expected_version: int | None = None,
    actor: audit.Actor | None = None,
) -> bool:
    """Cancel; return False when there was nothing to do (already canceled or scheduled).
    With ``actor``, the request is recorded in ``audit_event`` (changed or not).

    Immediately: the subscription becomes CANCELED and its OPEN invoices VOID (dunning stops;
    ``usecases.voiding`` gives their credit back). At period end: only the flag is set,
    and the renewer cancels instead of renewing. Raises ``VersionConflict`` when the
    subscription is not at ``expected_version`` or changes before the write.
    """
    sub, now = await subscriptions_repo.get_for_change(
        session, subscription_id, expected_version, now
    )
    state = subscriptions_repo.domain_state(sub)
    if at_period_end:
        new_state, events = sub_domain.schedule_cancel_at_period_end(state, now)
    else:
        new_state, events = sub_domain.cancel_now(state, now)
    if new_state == state:
        await audit.record_subscription_change(
            session,
            actor,
            audit.SUBSCRIPTION_CANCEL,
            subscription_id,
            before=sub.version,
            after=sub.version,
            detail={"atPeriodEnd": at_period_end, "changed": False},
            now=now,
        )
        return False

    # The subscription row first (version check and row lock), then its invoices: the same
    # lock order as recording a payment result, so the two never deadlock.
    version = await subscriptions_repo.update_versioned(
        session,
        subscription_id,
        expected_version=sub.version,
        now=now,
        values={
            "status": str(new_state.status),
            "canceled_at": new_state.canceled_at,
            "cancel_at_period_end": new_state.cancel_at_period_end,
            **subscriptions_repo.pause_values(new_state.pause),
        },
    )
    voided = [] if at_period_end else await void_open_invoices(session, subscription_id, now=now)
    await outbox.append_events(session, voided + events, now)
    await audit.record_subscription_change(
        session,
        actor,
        audit.SUBSCRIPTION_CANCEL,
        subscription_id,
        before=sub.version,
        after=version,
        detail={"atPeriodEnd": at_period_end, "changed": True},
        now=now,
    )
    return True


async def resume_renewal(
    session: AsyncSession,
    *,
    subscription_id: int,
    now: datetime,
    expected_version: int | None = None,
    actor: audit.Actor | None = None,
) -> bool:
    """Undo a cancel scheduled for the period end; return False when none was scheduled.
    A canceled subscription refuses (``SubscriptionCanceledError``). With ``actor``, the request
    is recorded in ``audit_event`` (changed or not)."""
    sub, now = await subscriptions_repo.get_for_change(
        session, subscription_id, expected_version, now
    )
    state = subscriptions_repo.domain_state(sub)
    new_state, events = sub_domain.resume_renewal(state, now)
    if new_state == state:
        await audit.record_subscription_change(
            session,
            actor,
            audit.SUBSCRIPTION_RESUME_RENEWAL,
            subscription_id,
            before=sub.version,
            after=sub.version,
            detail={"changed": False},
            now=now,
        )
        return False
    version = await subscriptions_repo.update_versioned(
        session,
        subscription_id,
        expected_version=sub.version,
        now=now,
        values={"cancel_at_period_end": new_state.cancel_at_period_end},
    )
    await outbox.append_events(session, events, now)
    await audit.record_subscription_change(
        session,
        actor,
        audit.SUBSCRIPTION_RESUME_RENEWAL,
        subscription_id,
        before=sub.version,
        after=version,
        detail={"changed": True},
        now=now,
    )
    return True
