"""``billing reconcile``: what needs a person — invoices held after uncertain or refused
answers, gateway reports that did not match their invoice, refunds the gateway refused — with
ids and the gateway's own words; and marking one resolved (who, when, how: kept in the DB)."""

from __future__ import annotations

from datetime import datetime

from rich.console import Console
from rich.table import Table

from billing_core.db import pg
from billing_core.repo import audit
from billing_core.repo import reconciliation as reconciliation_repo
from billing_core.repo.reconciliation import MEANINGS, Item
from billing_core.usecases import reconciliation as reconciliation_uc


async def gather(pool: pg.Pool, *, include_resolved: bool = False) -> list[Item]:
    async with pool.acquire() as conn:
        return await reconciliation_repo.list_items(conn, include_resolved=include_resolved)


async def resolve(pool: pg.Pool, item_id: int, *, who: str, how: str, now: datetime) -> bool:
    """Mark an open item resolved, with its ``audit_event`` row (committed here); False when no
    such open item exists."""
    async with pg.transaction(pool) as conn:
        return await reconciliation_uc.resolve_item(
            conn, item_id, actor=audit.Actor.cli(), who=who, how=how, now=now
        )


def render(items: list[Item], console: Console | None = None) -> None:
    console = console or Console()
    if not items:
        console.print("nothing needs a person")
        return
    table = Table(title=f"Needs a person ({len(items)})")
    for column in (
        "item",
        "kind",
        "invoice",
        "subscription",
        "invoice status",
        "key",
        "gateway ref",
        "amount",
        "what the gateway said",
        "since",
        "resolved",
    ):
        table.add_column(column)
    for item in items:
        amount = "-" if item.amount is None else f"{item.amount} {item.currency}"
        resolved = "-"
        if item.resolved_at is not None:
            resolved = f"{item.resolved_at:%Y-%m-%d %H:%M} by {item.resolved_by}: {item.resolution}"
        table.add_row(
            str(item.id),
            item.kind,
            str(item.invoice_id),
            str(item.subscription_id),
            item.invoice_status,
            item.idempotency_key or "-",
            item.gateway_reference or "-",
            amount,
            _said(item),
            f"{item.created_at:%Y-%m-%d %H:%M:%S}",
            resolved,
        )
    console.print(table)
    console.print(
        "Settle each at the gateway, then: billing reconcile --resolve ITEM --note 'what was done'"
    )


def _said(item: Item) -> str:
    """The reason as recorded (it carries the gateway's words), and the attempt's or refund's
    error when it adds something."""
    words = item.reason
    if item.gateway_said and item.gateway_said not in words:
        words = f"{words} ({item.gateway_said})"
    meaning = MEANINGS.get(item.kind)
    return f"{meaning}: {words}" if meaning else words
