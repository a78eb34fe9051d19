"""Gather the evidence and run every invariant."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.invariants.database import (
    check_amounts,
    check_charges,
    check_periods,
    check_stuck,
)
from billing_core.invariants.events import TopicEvidence, check_events, read_topic
from billing_core.invariants.report import Check, Report


@dataclass(frozen=True)
class LedgerEvidence:
    successes: dict[int, int]
    duplicate_success_invoices: list[int]


async def fetch_ledger(gateway_url: str) -> LedgerEvidence:
    async with httpx.AsyncClient(base_url=gateway_url, timeout=120) as client:
        successes = (await client.get("/v1/ledger/successes-by-invoice")).raise_for_status()
        summary = (await client.get("/v1/ledger/summary")).raise_for_status().json()
    return LedgerEvidence(
        successes={int(i): int(n) for i, n in successes.json()},
        duplicate_success_invoices=[int(i) for i in summary["duplicate_success_invoices"]],
    )


async def check_all(
    engine: AsyncEngine,
    *,
    now: datetime,
    ledger: LedgerEvidence | None,
    topic: TopicEvidence | None,
    renewal_tolerance: timedelta = timedelta(minutes=5),
    retry_bound: timedelta = timedelta(minutes=20),
    since_invoice_id: int = 0,
) -> Report:
    """Run every invariant. Invoices up to ``since_invoice_id`` are history imported without
    gateway or event evidence (seeded data): their periods and amounts are checked, not their
    charges and events."""
    async with engine.connect() as conn:
        checks: list[Check] = [
            await check_periods(conn, now=now, renewal_tolerance=renewal_tolerance),
            await check_charges(
                conn,
                ledger.successes if ledger else None,
                ledger.duplicate_success_invoices if ledger else None,
                since_invoice_id,
            ),
        ]
        if topic is None:
            skipped = "no Kafka topic read"
            checks += [
                Check(
                    "events",
                    "PAID -> InvoicePaid, CANCELED -> SubscriptionCanceled",
                    skipped=skipped,
                ),
                Check("sequence", "per-subscription sequence", skipped=skipped),
            ]
        else:
            checks += list(await check_events(conn, topic, since_invoice_id))
        checks += [
            await check_amounts(conn),
            await check_stuck(conn, now=now, retry_bound=retry_bound),
        ]
    return Report(checks)


async def run_checker(
    engine: AsyncEngine,
    *,
    now: datetime,
    gateway_url: str | None,
    kafka_bootstrap: str | None,
    topic: str | None,
    renewal_tolerance: timedelta = timedelta(minutes=5),
    retry_bound: timedelta = timedelta(minutes=20),
    since_invoice_id: int = 0,
) -> Report:
    ledger = await fetch_ledger(gateway_url) if gateway_url else None
    evidence = await read_topic(kafka_bootstrap, topic) if kafka_bootstrap and topic else None
    return await check_all(
        engine,
        now=now,
        ledger=ledger,
        topic=evidence,
        renewal_tolerance=renewal_tolerance,
        retry_bound=retry_bound,
        since_invoice_id=since_invoice_id,
    )
