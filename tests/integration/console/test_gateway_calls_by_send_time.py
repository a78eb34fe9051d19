"""The console's chart and ``billing status`` count gateway calls in the second they were sent:
the answers of a group are recorded together, a stall's all at once, and counted by their
recording they would show a second far above the limit that the gateway never saw."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import httpx
from fastapi import FastAPI

from billing_core.db import pg
from billing_core.settings import CoreSettings
from services.ops import status
from tests.integration.api.conftest import START
from tests.integration.console.conftest import logged_in
from tests.support.factories import due_subscriptions_with_invoices

LIMIT = 200
# Calls sent in each second before START (the console's clock), their answers recorded in one
# group half a second before START: 400 answers in one second, never more than 150 calls sent.
SENT = {5: 120, 4: 150, 3: 90, 1: 40}
RECORDED_AT = START - timedelta(seconds=0.5)
BUSIEST_SENT = max(SENT.values())
LAST_SECOND_SENT = SENT[1]


async def answered_late(pool: pg.Pool) -> None:
    """The collector's calls of ``SENT``, their answers recorded at ``RECORDED_AT``; and a
    webhook's report in the same second, which is no call."""
    async with pg.transaction(pool) as conn:
        invoices = await due_subscriptions_with_invoices(
            conn, sum(SENT.values()) + 1, now=START - timedelta(days=1), first_customer=7000
        )
        sent_at: list[datetime | None] = [
            START - timedelta(seconds=before) + timedelta(seconds=i / count)
            for before, count in SENT.items()
            for i in range(count)
        ]
        sources = ["COLLECTOR"] * len(sent_at) + ["WEBHOOK"]
        await conn.execute(
            """
            INSERT INTO payment_attempt (invoice_id, attempt_number, idempotency_key, source,
                                         outcome, amount, currency, requested_at, recorded_at)
            SELECT invoice, 0, 'inv-' || invoice || '-try-0', source, 'SUCCESS', 990, 'EUR',
                   sent_at, $4
            FROM unnest($1::bigint[], $2::text[], $3::timestamptz[]) AS a(invoice, source, sent_at)
            """,
            invoices,
            sources,
            [*sent_at, None],
            RECORDED_AT,
        )


def found_in(page: httpx.Response, pattern: str) -> str:
    found = re.search(pattern, page.text)
    assert found is not None, page.text
    return found.group(1)


async def test_the_console_chart_counts_calls_in_the_second_they_were_sent(
    app: FastAPI, api_key: str, pool: pg.Pool
) -> None:
    await answered_late(pool)
    async with logged_in(app, api_key) as console:
        page = await console.get("/console/fragments/overview")
    assert page.status_code == 200
    assert found_in(page, r"busiest second (\d+), limit") == str(BUSIEST_SENT)
    assert found_in(page, r'data-metric="rate">([^<]*)<') == f"{LAST_SECOND_SENT} / {LIMIT}"
    assert "Gateway calls per second, by send time" in page.text


async def test_billing_status_counts_calls_in_the_second_they_were_sent(
    pool: pg.Pool, settings: CoreSettings, redis_prefix: str
) -> None:
    await answered_late(pool)
    found = await status.gather(
        pool, START, settings.redis_url, f"{redis_prefix}permits", LIMIT, guard_ms=20
    )
    gateway = status.as_dict(found, START)["gateway"]
    assert isinstance(gateway, dict)
    assert gateway["busiest_second"] == BUSIEST_SENT
    assert gateway["calls_last_second"] == LAST_SECOND_SENT
    assert gateway["window_seconds"] == 180
    per_second = found.calls.per_second
    assert [per_second[-1 - before] for before in SENT] == list(SENT.values())
