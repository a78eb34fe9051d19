"""Recording the gateway's webhook events, one or a group of them, in the caller's transaction.

Each event id is recorded once (``webhook_event``); an event seen before — earlier, or earlier
in the same group — is a DUPLICATE and changes nothing. A first charge result goes through
:func:`record_charge_results`, the collector's rules, in the group's order.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from billing_core.domain.dunning import DunningPolicy
from billing_core.repo import payment_results as results_repo
from billing_core.repo import webhook_events
from billing_core.repo.payment_results import AttemptToRecord
from billing_core.repo.webhook_events import ReceivedEvent
from billing_core.usecases.payment_result import record_charge_results


@dataclass(frozen=True)
class WebhookToRecord:
    event: ReceivedEvent
    result: AttemptToRecord | None  # None: an event type that carries no charge result


async def record_webhooks(
    session: results_repo.Db,
    webhooks: Sequence[WebhookToRecord],
    *,
    now: datetime,
    rng: random.Random,
    policy: DunningPolicy,
    key_prefix: str = "",
) -> list[str]:
    """One answer per webhook, in order: DUPLICATE, IGNORED, or what recording its result did."""
    distinct: dict[str, WebhookToRecord] = {}
    for webhook in webhooks:
        distinct.setdefault(webhook.event.event_id, webhook)
    first_seen = await webhook_events.record_many(
        session, [w.event for w in distinct.values()], received_at=now
    )
    answers = ["DUPLICATE"] * len(webhooks)
    to_record: list[AttemptToRecord] = []
    positions: list[int] = []
    for position, webhook in enumerate(webhooks):
        event_id = webhook.event.event_id
        if event_id not in first_seen or distinct[event_id] is not webhook:
            continue
        if webhook.result is None:
            answers[position] = "IGNORED"
        else:
            to_record.append(webhook.result)
            positions.append(position)
    outcomes = await record_charge_results(
        session, to_record, now=now, rng=rng, policy=policy, key_prefix=key_prefix
    )
    for position, outcome in zip(positions, outcomes, strict=True):
        answers[position] = str(outcome)
    return answers
