"""Cancel a subscription, now or at the end of its current period."""

from __future__ import annotations

from datetime import datetime

from billing_core.db.pg import Connection
from billing_core.domain import subscription as sub_domain
from billing_core.repo import audit
from billing_core.repo import subscriptions as subscriptions_repo
from billing_core.usecases.lifecycle import Decision, Outcome, change_subscription
from billing_core.usecases.voiding import void_open_invoices


async def cancel(
    conn: Connection,
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

    async def decide(sub: subscriptions_repo.Subscription, now: datetime) -> Decision[bool]:
        state = subscriptions_repo.domain_state(sub)
        if at_period_end:
            new_state, events = sub_domain.schedule_cancel_at_period_end(state, now)
        else:
            new_state, events = sub_domain.cancel_now(state, now)
        changed = new_state != state
        outcome = Outcome(changed, events, {"atPeriodEnd": at_period_end, "changed": changed})
        if not changed:
            return Decision(outcome)

        async def void(_version: int, decided: Outcome[bool]) -> Outcome[bool]:
            # After the subscription row (its lock): the lock order of recording a payment
            # result, so the two never deadlock.
            voided = await void_open_invoices(conn, subscription_id, now=now)
            return Outcome(decided.result, [*voided, *decided.events], decided.detail)

        values = {
            "status": str(new_state.status),
            "canceled_at": new_state.canceled_at,
            "cancel_at_period_end": new_state.cancel_at_period_end,
            **subscriptions_repo.pause_values(new_state.pause),
        }
        return Decision(outcome, values, None if at_period_end else void)

    return await change_subscription(
        conn,
        decide,
        subscription_id=subscription_id,
        action=audit.SUBSCRIPTION_CANCEL,
        now=now,
        expected_version=expected_version,
        actor=actor,
    )


async def resume_renewal(
    conn: Connection,
    *,
    subscription_id: int,
    now: datetime,
    expected_version: int | None = None,
    actor: audit.Actor | None = None,
) -> bool:
    """Undo a cancel scheduled for the period end; return False when none was scheduled.
    A canceled subscription refuses (``SubscriptionCanceledError``). With ``actor``, the request
    is recorded in ``audit_event`` (changed or not)."""

    async def decide(sub: subscriptions_repo.Subscription, now: datetime) -> Decision[bool]:
        state = subscriptions_repo.domain_state(sub)
        new_state, events = sub_domain.resume_renewal(state, now)
        changed = new_state != state
        outcome = Outcome(changed, events, {"changed": changed})
        if not changed:
            return Decision(outcome)
        return Decision(outcome, {"cancel_at_period_end": new_state.cancel_at_period_end})

    return await change_subscription(
        conn,
        decide,
        subscription_id=subscription_id,
        action=audit.SUBSCRIPTION_RESUME_RENEWAL,
        now=now,
        expected_version=expected_version,
        actor=actor,
    )
