"""Pause and resume a subscription's collection (on request; ``resume_due_pauses`` is the
renewer's automatic resume at a pause's ``resumesAt``).

A pause leaves the status and the periods alone: the renewer keeps renewing (its set-based
batch, catch-up included) and creates the renewal invoice of each paused period VOID or DRAFT
(``domain.renewal``); the collector leaves every invoice of a paused subscription alone, so an
OPEN invoice in dunning when the pause starts keeps its schedule and is retried when it resumes.
"""

from __future__ import annotations

from datetime import datetime

from billing_core.db.pg import Connection
from billing_core.domain import events as ev
from billing_core.domain import subscription as sub_domain
from billing_core.domain.subscription import PauseBehavior
from billing_core.repo import audit, outbox
from billing_core.repo import pauses as pauses_repo
from billing_core.repo import subscriptions as subscriptions_repo
from billing_core.usecases.lifecycle import Decision, Outcome, change_subscription


class ResumeConflict(Exception):
    """A claimed pause was not resumed: the batch must be rolled back."""


async def pause(
    conn: Connection,
    *,
    subscription_id: int,
    behavior: PauseBehavior,
    resumes_at: datetime | None,
    now: datetime,
    expected_version: int | None = None,
    actor: audit.Actor | None = None,
) -> bool:
    """Pause collection (or change the pause); False when it was already paused that way.
    With ``actor``, the request is recorded in ``audit_event`` (changed or not)."""

    async def decide(sub: subscriptions_repo.Subscription, now: datetime) -> Decision[bool]:
        state = subscriptions_repo.domain_state(sub)
        new_state, events = sub_domain.pause(state, behavior, now, resumes_at=resumes_at)
        changed = new_state != state
        detail = {"behavior": str(behavior), "resumesAt": ev.iso(resumes_at), "changed": changed}
        values = subscriptions_repo.pause_values(new_state.pause) if changed else None
        return Decision(Outcome(changed, events, detail), values)

    return await change_subscription(
        conn,
        decide,
        subscription_id=subscription_id,
        action=audit.SUBSCRIPTION_PAUSE,
        now=now,
        expected_version=expected_version,
        actor=actor,
    )


async def resume(
    conn: Connection,
    *,
    subscription_id: int,
    now: datetime,
    expected_version: int | None = None,
    actor: audit.Actor | None = None,
) -> bool:
    """Resume collection; False when it was not paused. A canceled subscription refuses."""

    async def decide(sub: subscriptions_repo.Subscription, now: datetime) -> Decision[bool]:
        state = subscriptions_repo.domain_state(sub)
        new_state, events = sub_domain.resume(state, now)
        changed = new_state != state
        values = subscriptions_repo.pause_values(None) if changed else None
        return Decision(Outcome(changed, events, {"changed": changed}), values)

    return await change_subscription(
        conn,
        decide,
        subscription_id=subscription_id,
        action=audit.SUBSCRIPTION_RESUME,
        now=now,
        expected_version=expected_version,
        actor=actor,
    )


async def resume_due_pauses(conn: Connection, *, now: datetime, limit: int = 1000) -> int:
    """Resume the pauses whose ``resumesAt`` has come (the renewer, each tick, after its
    renewal batches); return how many. Exactly once: the claim locks the rows
    (``SKIP LOCKED``) and the write clears the pause with its SubscriptionResumed. A pause is
    resumed only once the renewer has invoiced every period that starts before its
    ``resumesAt`` (those are paused periods), so a late renewer never collects them."""
    due = await pauses_repo.claim_due_resumes(conn, now=now, limit=limit)
    if not due:
        return 0
    reserved = await pauses_repo.mark_resumed(conn, [d.id for d in due], now=now)
    if len(reserved) != len(due):
        raise ResumeConflict(f"pauses changed under their row lock: {len(due) - len(reserved)}")
    events = [ev.subscription_resumed(d.id, d.paused_at, d.resumes_at, automatic=True) for d in due]
    await outbox.insert_numbered_events(conn, events, reserved, now)
    return len(events)
