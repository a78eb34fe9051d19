"""Recording the gateway's webhook events, one or a group of them, in the caller's transaction.

Each event id is recorded once (``webhook_event``); an event seen before — earlier, or earlier
in the same group — is a DUPLICATE and changes nothing. A first charge result goes through
:func:`record_charge_results`, the collector's rules, in the group's order.

An event about a charge already taken (a refund or a dispute made at the gateway) is matched to
our successful charge by the gateway's reference: when a person must look (a dispute, money
given back that we did not ask for), a reconciliation item is written (RECONCILIATION); our own
refund's event changes nothing (IGNORED); a charge we do not know is NOT_FOUND.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from billing_core.db.pg import Connection
from billing_core.domain.dunning import DunningPolicy
from billing_core.repo import gateway_charges, webhook_events
from billing_core.repo import reconciliation as reconciliation_repo
from billing_core.repo.payment_results import AttemptToRecord
from billing_core.repo.webhook_events import ReceivedEvent
from billing_core.usecases.payment_result import record_charge_results


@dataclass(frozen=True)
class AboutACharge:
    """An event about a charge already taken, for a person unless it is our own refund."""

    gateway_reference: str
    reason: str  # ``<kind>: <details>`` for the reconciliation item
    ours_if_refund_requested: bool = False  # a refund event: ours when we asked for it


@dataclass(frozen=True)
class WebhookToRecord:
    event: ReceivedEvent
    result: AttemptToRecord | None  # None: an event type that carries no charge result
    about_charge: AboutACharge | None = None


async def record_webhooks(
    conn: Connection,
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
        conn, [w.event for w in distinct.values()], received_at=now
    )
    answers = ["DUPLICATE"] * len(webhooks)
    to_record: list[AttemptToRecord] = []
    positions: list[int] = []
    about: dict[int, AboutACharge] = {}
    for position, webhook in enumerate(webhooks):
        event_id = webhook.event.event_id
        if event_id not in first_seen or distinct[event_id] is not webhook:
            continue
        if webhook.result is not None:
            to_record.append(webhook.result)
            positions.append(position)
        elif webhook.about_charge is not None:
            about[position] = webhook.about_charge
        else:
            answers[position] = "IGNORED"
    outcomes = await record_charge_results(
        conn, to_record, now=now, rng=rng, policy=policy, key_prefix=key_prefix
    )
    for position, outcome in zip(positions, outcomes, strict=True):
        answers[position] = str(outcome)
    if about:  # after the results: a success and a dispute of it may come in one group
        for position, answer in (await _about_charges(conn, about, now=now)).items():
            answers[position] = answer
    return answers


async def _about_charges(
    conn: Connection, about: dict[int, AboutACharge], *, now: datetime
) -> dict[int, str]:
    known = await gateway_charges.find_charges(
        conn, sorted({a.gateway_reference for a in about.values()})
    )
    answers: dict[int, str] = {}
    items: list[reconciliation_repo.NewItem] = []
    for position, event in about.items():
        charge = known.get(event.gateway_reference)
        if charge is None:
            answers[position] = "NOT_FOUND"
        elif event.ours_if_refund_requested and charge.refund_requested:
            answers[position] = "IGNORED"
        else:
            answers[position] = "RECONCILIATION"
            items.append(
                reconciliation_repo.NewItem(
                    invoice_id=charge.invoice_id,
                    subscription_id=charge.subscription_id,
                    reason=event.reason,
                    idempotency_key=charge.idempotency_key,
                    gateway_reference=charge.gateway_reference,
                    payment_attempt_id=charge.payment_attempt_id,
                )
            )
    await reconciliation_repo.add_items(conn, items, now=now)
    return answers
