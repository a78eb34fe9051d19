"""Gather the evidence and run every invariant.

Order matters against a running system: the gateway ledger is read first, then the topic, then
the database in one REPEATABLE READ snapshot. A charge is made before its invoice becomes PAID and
an event is written before it is published, so evidence read earlier can only lag behind the
database in the directions the checks tolerate (a charge being recorded, an event in the outbox).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from billing_core.db.pg import Pool, Statement, execute
from billing_core.invariants.amounts import check_amounts
from billing_core.invariants.charges import check_charges
from billing_core.invariants.events import check_events, check_sequences
from billing_core.invariants.ledger import LedgerEvidence, fetch_ledger
from billing_core.invariants.lines import check_lines
from billing_core.invariants.numbers import check_numbers
from billing_core.invariants.pauses import check_pauses
from billing_core.invariants.periods import check_periods
from billing_core.invariants.report import Check, Report
from billing_core.invariants.stuck import DEFAULT_RETRY_BOUND, check_stuck
from billing_core.invariants.topic import TopicEvidence, read_topic

__all__ = ["LedgerEvidence", "check_all", "fetch_ledger", "run_checker"]

# The checks read whole tables in one snapshot: the pool's statement timeout, set for the
# processes' short statements, does not bound them.
_NO_STATEMENT_TIMEOUT = Statement("SET LOCAL statement_timeout = 0")

DEFAULT_RENEWAL_TOLERANCE = timedelta(minutes=5)
DEFAULT_PUBLISH_BOUND = timedelta(minutes=5)


async def check_all(
    pool: Pool,
    *,
    now: datetime,
    ledger: LedgerEvidence | None,
    topic: TopicEvidence | None,
    renewal_tolerance: timedelta = DEFAULT_RENEWAL_TOLERANCE,
    retry_bound: timedelta = DEFAULT_RETRY_BOUND,
    publish_bound: timedelta = DEFAULT_PUBLISH_BOUND,
    since: datetime | None = None,
) -> Report:
    """Every invariant on the database, against the ledger and topic snapshots given.

    An invoice paid by an imported payment (``payment_attempt.source = 'IMPORT'``, e.g. seeded
    history) needs no gateway charge and no event. ``since``: PAID invoices and CANCELED
    subscriptions that reached that state before it are taken as given too (no charge, no event
    expected) — for other history without its evidence (a simulator restarted since).
    """
    # One snapshot of the database for every check (see the module's docstring).
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
        await execute(conn, _NO_STATEMENT_TIMEOUT)
        checks: list[Check] = [
            await check_periods(
                conn,
                now=now,
                renewal_tolerance=renewal_tolerance,
                plan_changes=topic.plan_changes if topic else (),
            ),
            await check_charges(
                conn,
                ledger,
                now=now,
                reconciled=topic.reconciliation_invoices if topic else (),
                since=since,
            ),
        ]
        if topic is None:
            checks += [
                Check("events", "PAID -> InvoicePaid, CANCELED -> SubscriptionCanceled"),
                Check("sequence", "per-subscription sequence only goes forward, no hole"),
            ]
            for check in checks[-2:]:
                check.skipped = "no Kafka topic read"
        else:
            checks += [
                await check_events(conn, topic, now=now, publish_bound=publish_bound, since=since),
                check_sequences(topic),
            ]
        checks += [
            await check_amounts(conn, plan_changes=topic.plan_changes if topic else ()),
            await check_lines(conn),
            await check_numbers(conn),
            await check_stuck(
                conn,
                now=now,
                retry_bound=retry_bound,
                reconciled=topic.reconciliation_invoices if topic else (),
            ),
            await check_pauses(conn),
        ]
    return Report(checks)


async def run_checker(
    pool: Pool,
    *,
    now: datetime,
    gateway_url: str | None,
    kafka_bootstrap: str | None,
    topic: str | None,
    renewal_tolerance: timedelta = DEFAULT_RENEWAL_TOLERANCE,
    retry_bound: timedelta = DEFAULT_RETRY_BOUND,
    publish_bound: timedelta = DEFAULT_PUBLISH_BOUND,
    since: datetime | None = None,
) -> Report:
    """Read the ledger (if a gateway URL is given), then the topic, then check."""
    ledger = await fetch_ledger(gateway_url) if gateway_url else None
    evidence = await read_topic(kafka_bootstrap, topic) if kafka_bootstrap and topic else None
    return await check_all(
        pool,
        now=now,
        ledger=ledger,
        topic=evidence,
        renewal_tolerance=renewal_tolerance,
        retry_bound=retry_bound,
        publish_bound=publish_bound,
        since=since,
    )
