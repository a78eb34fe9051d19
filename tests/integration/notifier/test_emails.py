"""The notifier addresses every e-mail of a subscription to its customer, learned from the
subscription's SubscriptionCreated, and reads payloads through their models."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from billing_core.cloudevents import CloudEvent
from billing_core.db import pg
from billing_core.domain import events as ev
from billing_core.domain.events import DomainEvent
from services.notifier.emails import email_to_send

NOW = datetime(2026, 12, 1, 8, tzinfo=UTC)


def record(event: DomainEvent, sequence: int, *, version: int = 1) -> CloudEvent:
    return CloudEvent(
        id=uuid.uuid4(),
        event_type=str(event.type),
        source="urn:billing:outbox",
        time=NOW,
        subscription_id=event.subscription_id,
        sequence=sequence,
        schema_version=version,
        data=event.payload_json().encode(),
    )


async def test_later_emails_go_to_the_customer_named_by_subscription_created(
    pool: pg.Pool,
) -> None:
    created = ev.subscription_created(7, 4242, "BASIC_MONTHLY", NOW, NOW, "UTC")
    paid = ev.invoice_paid(7, 70, 990, "EUR", NOW)
    failed = ev.payment_failed(7, 71, 1, "card_declined", None)
    async with pg.transaction(pool) as conn:
        welcome = await email_to_send(conn, record(created, 1))
    async with pg.transaction(pool) as conn:
        receipt = await email_to_send(conn, record(paid, 2))
        declined = await email_to_send(conn, record(failed, 3))
    assert welcome is not None and receipt is not None and declined is not None
    assert {welcome.to, receipt.to, declined.to} == {"customer-4242@example.invalid"}
    assert receipt.subject == "Payment received, thank you"


async def test_a_subscription_never_announced_gets_the_fallback_address(
    pool: pg.Pool,
) -> None:
    async with pg.transaction(pool) as conn:
        email = await email_to_send(conn, record(ev.invoice_voided(8, 80, NOW), 5))
    assert email is not None
    assert email.to == "subscription-8@example.invalid"


async def test_a_newer_version_is_skipped_and_a_malformed_payload_raises(
    pool: pg.Pool,
) -> None:
    paid = ev.invoice_paid(9, 90, 990, "EUR", NOW)
    async with pg.transaction(pool) as conn:
        assert await email_to_send(conn, record(paid, 1, version=2)) is None
    broken = dataclasses.replace(record(paid, 1), data=b'{"subscriptionId": 9, "amount": "x"}')
    async with pg.transaction(pool) as conn:
        with pytest.raises(ValidationError):
            await email_to_send(conn, broken)


async def test_a_trial_is_welcomed_as_one_and_its_end_announced(
    pool: pg.Pool,
) -> None:
    trial_end = datetime(2026, 12, 15, 9, 30, tzinfo=UTC)
    created = ev.subscription_created(
        9, 4343, "PRO_MONTHLY", NOW, trial_end, "UTC", trial_end=trial_end
    )
    async with pg.transaction(pool) as conn:
        welcome = await email_to_send(conn, record(created, 1))
        soon = await email_to_send(conn, record(ev.subscription_trial_will_end(9, trial_end), 2))
        ended = await email_to_send(
            conn, record(ev.subscription_trial_ended(9, trial_end, early=False), 3)
        )
    assert welcome is not None and soon is not None and ended is not None
    assert welcome.subject == "Welcome: your free trial has started"
    assert soon.subject == "Your free trial ends soon: on 2026-12-15 09:30 UTC"
    assert soon.to == ended.to == "customer-4343@example.invalid"
    assert ended.subject == "Your free trial has ended: your subscription is active"
