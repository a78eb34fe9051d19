"""The 1st of the month end to end: every process started as ``make up`` starts them, a
newcomer's ``billing demo`` then ``billing check`` beside them, and the evidence read back
from the gateway's own ledger, its metrics and the Kafka topic."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from billing_core.db import migrate
from billing_core.invariants.topic import read_topic
from tests.support.db import recreate_database
from tests.support.infra import Services, checkout_database_name
from tests.support.mail import mail_server
from tests.support.system import System

SUBSCRIPTIONS = 3000
LIMIT = 200

pytestmark = pytest.mark.slow


def metric(text_body: str, name: str, **labels: str) -> float:
    """One sample of a Prometheus text exposition (0 when absent)."""
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = re.escape(name) + (r"\{" + re.escape(wanted) + r"\}" if labels else "") + r" (\S+)"
    found = re.search(r"^" + pattern + r"$", text_body, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


@pytest.fixture(scope="module")
def system(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    name = f"{checkout_database_name()}_e2e"
    asyncio.run(recreate_database(services.admin_database_url, name))
    url = services.database_url(name)
    migrate.upgrade(url)
    # The demo's customers have addresses: their receipts go to a mail server of this run's own.
    with mail_server(tmp_path_factory.mktemp("mail")) as mail:
        system = System(
            database_url=url,
            redis_url=services.redis_url,
            kafka_bootstrap=services.kafka_bootstrap,
            log_dir=tmp_path_factory.mktemp("system"),
            extra_env={"BILLING_NOTIFIER_SMTP_PORT": str(mail.port)},
        )
        system.start()
        yield system
        system.stop()


def wait_webhooks_settled(system: System, timeout: float) -> str:
    """The simulator's /metrics once its webhook backlog is empty."""
    deadline = time.monotonic() + timeout
    while True:
        body = httpx.get(f"{system.gateway_url}/metrics", timeout=10).text
        if metric(body, "billing_gateway_sim_webhook_backlog_deliveries") == 0:
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"webhook backlog not empty after {timeout:g} s")
        time.sleep(1)


def test_demo_drains_at_the_limit_and_the_checker_finds_nothing(
    system: System, tmp_path: Path
) -> None:
    plot = tmp_path / "demo.png"
    demo = system.cli(
        "demo",
        "--subscriptions",
        str(SUBSCRIPTIONS),
        "--due-within-s",
        "10",
        "--decline-share",
        "0.02",
        "--timeout-s",
        "420",
        "--gateway-url",
        system.gateway_url,
        "--plot",
        str(plot),
        *[f"--wait-for={url}" for url in system.ports.health_urls().values()],
        timeout=600,
    )
    report = f"{demo.stdout}\n{demo.stderr}\n{system.log_tail()}"
    assert demo.returncode == 0, report
    assert "Traceback" not in demo.stdout + demo.stderr
    assert plot.stat().st_size > 0

    sim_metrics = wait_webhooks_settled(system, timeout=120)
    summary = httpx.get(f"{system.gateway_url}/v1/ledger/summary", timeout=60).json()
    assert summary["rate_limited_429"] == 0, summary
    assert summary["max_arrivals_in_any_rolling_second"] <= LIMIT, summary
    assert summary["duplicate_success_invoices"] == [], summary
    deliveries = "billing_gateway_sim_webhook_deliveries_total"
    assert metric(sim_metrics, deliveries, result="delivered") >= summary["charges_succeeded"]
    assert metric(sim_metrics, deliveries, result="failed") == 0
    assert metric(sim_metrics, deliveries, result="dropped") == 0

    # Every invoice this run paid (not imported history) has its InvoicePaid on the topic.
    paid = asyncio.run(_paid_by_this_run(system.overrides["BILLING_DATABASE_URL"]))
    topic = asyncio.run(read_topic(system.overrides["BILLING_KAFKA_BOOTSTRAP"], system.topic))
    assert paid, "nothing was paid"
    assert paid <= set(topic.paid_invoices), sorted(paid - set(topic.paid_invoices))[:10]
    assert topic.invalid == []

    check = system.cli("check", "--gateway-url", system.gateway_url, timeout=300)
    assert check.returncode == 0, f"{check.stdout}\n{check.stderr}"

    assert system.stop(), f"a process had to be killed:\n{system.log_tail()}"


async def _paid_by_this_run(database_url: str) -> set[int]:
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                text(
                    "SELECT id FROM invoice i WHERE status = 'PAID' AND NOT EXISTS ("
                    " SELECT 1 FROM payment_attempt a WHERE a.invoice_id = i.id"
                    " AND a.source = 'IMPORT')"
                )
            )
            return {int(r[0]) for r in rows}
    finally:
        await engine.dispose()
