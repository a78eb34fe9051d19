"""``billing demo`` beside the whole system (as ``make up`` runs it, the notifier pointed at a
mail server of the test's own): the demo's customers have addresses, so every invoice the run
paid is a receipt in the mail server's directory, to ``customer-<id>@example.test``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from billing_core.db.pg import asyncpg_dsn
from tests.support.infra import Services
from tests.support.mail import MailServer, mail_server
from tests.support.system import System, running_system

pytestmark = pytest.mark.slow  # the whole system in real time: `make test`, not test-fast

SUBSCRIPTIONS = 20
RECEIPT = "Payment received, thank you"


@pytest.fixture
def mail(tmp_path: Path) -> Iterator[MailServer]:
    with mail_server(tmp_path / "mail") as server:
        yield server


@pytest.fixture
def system(services: Services, mail: MailServer, tmp_path: Path) -> Iterator[System]:
    extra_env = {"BILLING_NOTIFIER_SMTP_PORT": str(mail.port)}
    with running_system(services, "demo_mail", tmp_path / "system", extra_env=extra_env) as up:
        yield up


async def _paid(url: str) -> dict[int, int]:
    """Each invoice the run paid (an InvoicePaid written, not imported history): its customer."""
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        rows = await conn.fetch(
            "SELECT i.id, i.customer_id FROM outbox_event o "
            "JOIN invoice i ON i.id = CAST(o.payload ->> 'invoiceId' AS bigint) "
            "WHERE o.event_type = 'InvoicePaid'"
        )
        return {int(r["id"]): int(r["customer_id"]) for r in rows}
    finally:
        await conn.close()


def test_the_demos_customers_get_their_receipts_by_e_mail(
    system: System, mail: MailServer, tmp_path: Path
) -> None:
    demo = system.cli(
        "demo",
        "--subscriptions",
        str(SUBSCRIPTIONS),
        "--due-within-s",
        "2",
        "--decline-share",
        "0",
        "--timeout-s",
        "180",
        "--gateway-url",
        system.gateway_url,
        "--plot",
        str(tmp_path / "demo.png"),
        *[f"--wait-for={url}" for url in system.ports.health_urls().values()],
        timeout=300,
    )
    assert demo.returncode == 0, f"{demo.stdout}\n{demo.stderr}\n{system.log_tail()}"
    paid = asyncio.run(_paid(system.overrides["BILLING_DATABASE_URL"]))
    assert len(paid) >= SUBSCRIPTIONS // 2, paid  # the simulator declines a few cards

    expected = sorted(f"customer-{customer}@example.test" for customer in paid.values())
    deadline = time.monotonic() + 120
    receipts: list[str] = []
    while time.monotonic() < deadline:
        receipts = sorted(str(m["To"]) for m in mail.messages() if str(m["Subject"]) == RECEIPT)
        if len(receipts) >= len(expected):
            break
        time.sleep(1)
    assert receipts == expected, system.log_tail()
