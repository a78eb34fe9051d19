"""The operator console in a real browser (Chromium through Playwright) against the API under
uvicorn, a real database and, for the live overview, real collector and simulator processes."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from playwright.async_api import Page, expect
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.repo.reconciliation import NewItem, add_items
from services.api.console.routes import KEY_REFUSED
from tests.integration.api.conftest import ApiServer
from tests.integration.console.conftest import log_in, screenshot_path
from tests.support.factories import (
    create_invoice,
    create_subscription,
    driver_of,
    due_subscriptions_with_invoices,
)
from tests.support.processes import Proc, free_port, start

pytestmark = pytest.mark.timeout(300)


async def _seed_story(engine: AsyncEngine) -> tuple[int, int, int]:
    """A subscription of customer 4242 with a paid invoice (a declined then a successful
    attempt) and two published events; returns (subscription, invoice, customer)."""
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        sub = await create_subscription(conn, customer_id=4242, start=now - timedelta(days=3))
        inv = await create_invoice(
            conn,
            subscription_id=sub,
            customer_id=4242,
            amount=990,
            next_attempt_at=now,
            period_start=now - timedelta(days=3),
            status="PAID",
            attempt_count=1,
        )
        await conn.execute(
            text(
                """
                INSERT INTO payment_attempt (invoice_id, attempt_number, idempotency_key, source,
                    outcome, amount, currency, decline_code, gateway_reference, requested_at)
                VALUES (:inv, 0, :k0, 'COLLECTOR', 'DECLINED', 990, 'EUR', 'insufficient_funds',
                        NULL, :now),
                       (:inv, 1, :k1, 'COLLECTOR', 'SUCCESS', 990, 'EUR', NULL, 'ch_story_1', :now)
                """
            ),
            {"inv": inv, "k0": f"inv-{inv}-try-0", "k1": f"inv-{inv}-try-1", "now": now},
        )
        await conn.execute(
            text(
                """
                INSERT INTO outbox_event (event_id, aggregate_id, sequence, event_type, payload,
                    occurred_at, published_at)
                VALUES (:e1, :sub, 1, 'SubscriptionCreated', '{}', :now, :now),
                       (:e2, :sub, 2, 'InvoicePaymentSucceeded', '{}', :now, NULL)
                """
            ),
            {"e1": uuid.uuid4(), "e2": uuid.uuid4(), "sub": sub, "now": now},
        )
        # As the system leaves them: the subscription's next event is number 3, and a PAID
        # invoice has its payment time (later tests in this database write to this story).
        await conn.execute(
            text("UPDATE subscription SET event_seq = 2 WHERE id = :sub"), {"sub": sub}
        )
        await conn.execute(
            text("UPDATE invoice SET paid_at = :now WHERE id = :inv"), {"inv": inv, "now": now}
        )
    return sub, inv, 4242


async def test_login_refuses_a_bad_key_and_opens_the_overview_with_a_good_one(
    page: Page, console_server: ApiServer, operator_key: str
) -> None:
    await page.goto(console_server.base_url + "/console")
    await expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    await page.get_by_label("API key").fill("bk_not_a_key")
    await page.get_by_role("button", name="Log in").click()
    await expect(page.get_by_role("alert")).to_have_text(KEY_REFUSED)
    await page.get_by_label("API key").fill(operator_key)
    await page.get_by_role("button", name="Log in").click()
    await expect(page.get_by_role("heading", name="The 1st of the month")).to_be_visible()
    await expect(page.get_by_text("support-anna")).to_be_visible()
    await page.screenshot(path=screenshot_path("login-overview"), full_page=True)


async def test_search_by_invoice_id_shows_the_subscription_its_attempts_and_events(
    page: Page, console_server: ApiServer, operator_key: str, engine: AsyncEngine
) -> None:
    sub, inv, customer = await _seed_story(engine)
    await log_in(page, console_server.base_url, operator_key)
    await page.get_by_label("Subscription, customer or invoice id").fill(str(inv))
    await page.get_by_role("button", name="Find").click()
    await expect(page.get_by_role("heading", name=f"Subscription {sub}")).to_be_visible()
    await expect(page.get_by_text(str(customer), exact=True)).to_be_visible()
    invoice = page.locator(f"section#inv-{inv}, section[aria-labelledby='inv-{inv}']")
    await expect(invoice.get_by_role("heading", name=f"Invoice {inv}")).to_be_visible()
    await expect(invoice.get_by_text(f"inv-{inv}-try-0")).to_be_visible()
    await expect(invoice.get_by_text("insufficient_funds")).to_be_visible()
    await expect(invoice.get_by_text("ch_story_1")).to_be_visible()
    timeline = page.locator("ol.timeline")
    await expect(timeline.get_by_text("SubscriptionCreated")).to_be_visible()
    await expect(timeline.get_by_text("waiting for the relay")).to_be_visible()
    await page.screenshot(path=screenshot_path("subscription"), full_page=True)

    # by customer id: the customer's only subscription opens directly
    await page.get_by_label("Subscription, customer or invoice id").fill(str(customer))
    await page.get_by_role("button", name="Find").click()
    await expect(page.get_by_role("heading", name=f"Subscription {sub}")).to_be_visible()


async def test_the_overview_numbers_move_while_the_collector_charges(
    page: Page,
    console_server: ApiServer,
    operator_key: str,
    engine: AsyncEngine,
    collector_health_port: int,
    database_url: str,
    tmp_path: Path,
) -> None:
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        await due_subscriptions_with_invoices(conn, 400, now=now, first_customer=90000)
    await log_in(page, console_server.base_url, operator_key)
    open_invoices = page.locator("[data-metric='open-invoices']")
    await expect(open_invoices).to_have_text("400")
    await expect(page.get_by_text("collector: not answering")).to_be_visible()

    sim_port = free_port()
    sim = start(
        "console-sim",
        "services.gateway_sim",
        {
            "BILLING_GATEWAY_SIM_PORT": str(sim_port),
            "BILLING_GATEWAY_SIM_LATENCY_MIN_MS": "20",
            "BILLING_GATEWAY_SIM_LATENCY_MAX_MS": "60",
            "BILLING_GATEWAY_SIM_RATE_LIMIT_PER_SECOND": "50",
        },
        tmp_path,
        ready_url=f"http://127.0.0.1:{sim_port}/healthz",
    )
    collector: Proc | None = None
    try:
        collector = start(
            "console-collector",
            "services.collector",
            {
                "BILLING_DATABASE_URL": database_url,
                "BILLING_COLLECTOR_GATEWAY_URL": f"http://127.0.0.1:{sim_port}",
                "BILLING_COLLECTOR_HEALTH_PORT": str(collector_health_port),
                "BILLING_COLLECTOR_RATE_LIMIT_PER_SECOND": "50",
                "BILLING_COLLECTOR_RATE_LIMIT_KEY": f"test:{uuid.uuid4().hex[:10]}:permits",
                "BILLING_COLLECTOR_POLL_INTERVAL_SECONDS": "0.2",
            },
            tmp_path,
            ready_url=f"http://127.0.0.1:{collector_health_port}/readyz",
            timeout=60,
        )
        # The page refreshes itself (no reload here): the count falls, the process shows up.
        await expect(page.get_by_text("collector: ready")).to_be_visible(timeout=20_000)
        await expect(open_invoices).not_to_have_text("400", timeout=30_000)
        rate = page.locator("[data-metric='rate']")
        await expect(rate).not_to_have_text("0 / 200", timeout=20_000)
        await page.screenshot(path=screenshot_path("overview-live"), full_page=True)
        await expect(open_invoices).to_have_text("0", timeout=60_000)
    finally:
        if collector is not None:
            collector.terminate()
        sim.terminate()


async def test_an_operator_resolves_a_reconciliation_item_and_it_is_audited(
    page: Page, console_server: ApiServer, operator_key: str, engine: AsyncEngine
) -> None:
    sub, inv, _customer = await _seed_story(engine)
    async with engine.begin() as conn:
        await add_items(
            await driver_of(conn),
            [
                NewItem(
                    invoice_id=inv,
                    subscription_id=sub,
                    reason="unknown_unresolved: the gateway kept answering 503",
                    idempotency_key=f"inv-{inv}-try-1",
                )
            ],
            now=datetime.now(UTC),
        )
    await log_in(page, console_server.base_url, operator_key, "/console/reconciliation")
    item = page.locator("section.item")
    await expect(item.get_by_text("the gateway kept answering 503")).to_be_visible()
    await page.screenshot(path=screenshot_path("reconciliation"), full_page=True)
    await item.get_by_label("What was done").fill("refunded at the gateway, ticket 881")
    await item.get_by_role("button", name="Mark resolved").click()
    await expect(page.get_by_role("status")).to_contain_text("resolved")
    await expect(page.get_by_text("Nothing needs a person.")).to_be_visible()
    async with engine.connect() as conn:
        row = (
            await conn.execute(text("SELECT resolved_by, resolution FROM reconciliation_item"))
        ).one()
    assert row.resolved_by == "console:support-anna"
    assert row.resolution == "refunded at the gateway, ticket 881"
    async with engine.connect() as conn:
        audited = (
            await conn.execute(
                text(
                    "SELECT a.source, c.name FROM audit_event a "
                    "JOIN api_client c ON c.id = a.client_id "
                    "WHERE a.action = 'reconciliation.resolve'"
                )
            )
        ).all()
    assert [(r.source, r.name) for r in audited] == [("API", "support-anna")]


@pytest.mark.parametrize("path", ["/console", "/console/reconciliation", "/console/search"])
async def test_pages_fit_a_phone_width_without_sideways_scrolling(
    page: Page, console_server: ApiServer, operator_key: str, engine: AsyncEngine, path: str
) -> None:
    await _seed_story(engine)
    await page.set_viewport_size({"width": 390, "height": 844})
    await log_in(page, console_server.base_url, operator_key, path)
    await expect(page.locator("h1")).to_be_visible()
    overflow = await page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0
    if path == "/console":
        await page.screenshot(path=screenshot_path("overview-phone"), full_page=True)
