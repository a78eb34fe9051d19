"""SubscriptionTrialWillEnd: written once per trial, a lead time before the trial ends.

One batch inside the caller's transaction (the renewer runs it each tick, before its renewal
batches): claim the trials ending within ``lead`` of ``now`` that have no notice yet, mark them
and write their events, together. The renewal claim leaves a trial without its notice alone, so
a trial's end (SubscriptionTrialEnded or its cancel) always comes after its notice, and the mark
written with the event makes it exactly once — also for a trial shorter than the lead time, or
one whose end passed while no renewer ran (then the notice comes late, right before the end is
processed).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from billing_core.db.pg import Connection
from billing_core.domain import events as ev
from billing_core.repo import outbox as outbox_repo
from billing_core.repo import trial_notices as notices_repo

DEFAULT_LEAD = timedelta(days=3)


class NoticeConflict(Exception):
    """A claimed trial was not marked: the batch must be rolled back."""


async def send_trial_notices(
    conn: Connection,
    *,
    now: datetime,
    lead: timedelta = DEFAULT_LEAD,
    limit: int = 1000,
    only_id: int | None = None,
) -> int:
    """Write the due SubscriptionTrialWillEnd events (``only_id``: that subscription's, if
    due); return how many."""
    due = await notices_repo.claim_due_notices(
        conn, horizon=now + lead, limit=limit, only_id=only_id
    )
    if not due:
        return 0
    reserved = await notices_repo.mark_sent(conn, [t.id for t in due], now=now)
    if len(reserved) != len(due):
        raise NoticeConflict(f"trials changed under their row lock: {len(due) - len(reserved)}")
    events = [ev.subscription_trial_will_end(t.id, t.trial_end) for t in due]
    await outbox_repo.insert_numbered_events(conn, events, reserved, now)
    return len(events)
