"""One renewal batch, inside the caller's transaction (the caller commits; nothing here does).

1. Claim up to ``batch_size`` due ACTIVE subscriptions, oldest first, ``FOR UPDATE SKIP LOCKED``.
2. Plan each row with the pure domain rules (:mod:`billing_core.domain.renewal`), taxed at the
   subscription's rate if it has one and discounted by its coupon where it has one (the
   batch's rates and discounts each read in one statement); a row that
   cannot be planned is logged and parked (left untouched, reported to the caller), the rest go
   on.
3. Insert every renewal invoice in one statement, ``ON CONFLICT DO NOTHING`` on the renewal
   index. If some invoice already existed (a replayed batch), that insert is rolled back to its
   savepoint, the existing periods are looked up and the batch is planned again with them: an
   existing period is advanced over without a second invoice and without consuming credit. So a
   period is never advanced without its invoice, and no invoice is inserted twice.
4. Advance every subscription (version bump, and the event sequence numbers its events take),
   record the credit used, write the invoices' line items (their totals verified in the same
   statement) and insert the outbox events — each one statement for the whole batch.

Because all of this is one transaction, a process killed at any point leaves nothing half done:
PostgreSQL rolls the batch back, the row locks are released and another renewer takes the rows.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from billing_core.db.pg import Connection
from billing_core.domain import renewal as renewal_rules
from billing_core.domain.events import DomainEvent
from billing_core.domain.invoice import InvoiceStatus
from billing_core.domain.renewal import DueSubscription, RenewalPlan
from billing_core.logging import get_logger
from billing_core.repo import outbox as outbox_repo
from billing_core.repo import renewal as renewal_repo
from billing_core.repo.limits import require_positive_limit
from billing_core.usecases.renewal_lines import BatchPricing, batch_pricing, write_batch_lines

log = get_logger(__name__)


class RenewalConflict(Exception):
    """The batch's writes did not land as planned; the whole batch must be rolled back."""


@dataclass(slots=True)
class BatchResult:
    claimed: int = 0
    renewed_subscriptions: int = 0
    invoices_created: int = 0
    zero_amount_invoices: int = 0
    canceled: int = 0
    already_invoiced: int = 0
    credit_used: int = 0
    events: int = 0
    still_due: int = 0
    parked: list[int] = field(default_factory=list)
    invoice_ids: list[int] = field(default_factory=list)


def _plan_all(
    rows: Sequence[DueSubscription],
    *,
    now: datetime,
    max_periods: int,
    existing: Collection[tuple[int, datetime]],
    parked: list[int],
    pricing: BatchPricing,
) -> list[RenewalPlan]:
    plans: list[RenewalPlan] = []
    for due in rows:
        try:
            plans.append(
                renewal_rules.plan_renewal(
                    due,
                    now=now,
                    max_periods=max_periods,
                    existing=existing,
                    rate=pricing.rates.get(due.id),
                    discount=pricing.discounts.get(due.id),
                )
            )
        except Exception as exc:  # bad data: park the row visibly, keep the batch going
            parked.append(due.id)
            log.error("renewal_row_parked", subscription_id=due.id, error=repr(exc))
    return plans


async def _insert_invoices(
    conn: Connection, plans: Sequence[RenewalPlan], *, now: datetime
) -> list[renewal_repo.InsertedInvoice] | None:
    """Insert all planned invoices, or none (None) if any already existed."""
    wanted = [invoice for plan in plans for invoice in plan.invoices]
    return await renewal_repo.insert_all_renewal_invoices(conn, wanted, now=now)


async def _plan_and_insert(
    conn: Connection,
    rows: Sequence[DueSubscription],
    now: datetime,
    max_periods: int,
    parked: list[int],
    pricing: BatchPricing,
) -> tuple[list[RenewalPlan], list[renewal_repo.InsertedInvoice]]:
    plans = _plan_all(
        rows, now=now, max_periods=max_periods, existing=(), parked=parked, pricing=pricing
    )
    inserted = await _insert_invoices(conn, plans, now=now)
    if inserted is not None:
        return plans, inserted
    # Some renewal already exists (a replayed batch): plan again knowing which.
    keys = [(i.subscription_id, i.period_start) for plan in plans for i in plan.invoices]
    existing = await renewal_repo.existing_renewals(conn, keys)
    log.warning("renewal_invoices_already_exist", count=len(existing))
    # Planning is deterministic: the rows parked above fail the same way again.
    plans = _plan_all(
        rows, now=now, max_periods=max_periods, existing=existing, parked=[], pricing=pricing
    )
    inserted = await _insert_invoices(conn, plans, now=now)
    if inserted is None:
        raise RenewalConflict("renewal invoices appeared while the rows were locked")
    return plans, inserted


def _count_invoices(
    plan: RenewalPlan, invoice_ids: Sequence[int], result: BatchResult
) -> list[renewal_repo.CreditUse]:
    """Add the plan's invoices to the batch's counts; return the credit they consumed."""
    uses: list[renewal_repo.CreditUse] = []
    for invoice, invoice_id in zip(plan.invoices, invoice_ids, strict=True):
        if invoice.credit_applied:
            uses.append(renewal_repo.CreditUse(plan.due.id, invoice_id, invoice.credit_applied))
            result.credit_used += invoice.credit_applied
        if invoice.status == InvoiceStatus.PAID:
            result.zero_amount_invoices += 1
    result.invoice_ids.extend(invoice_ids)
    return uses


async def renew_due_batch(
    conn: Connection,
    *,
    now: datetime,
    batch_size: int,
    max_periods: int = 24,
    exclude_ids: Sequence[int] = (),
    only_id: int | None = None,
) -> BatchResult:
    """Renew (or cancel at period end) one batch of due subscriptions at ``now`` (``only_id``:
    just that one, if it is due)."""
    require_positive_limit(batch_size)
    if max_periods < 1:
        raise ValueError(f"max_periods must be at least 1, not {max_periods}")
    result = BatchResult()
    rows = await renewal_repo.claim_due(
        conn, now=now, limit=batch_size, exclude_ids=exclude_ids, only_id=only_id
    )
    result.claimed = len(rows)
    if not rows:
        return result

    pricing = await batch_pricing(conn, [row.id for row in rows])
    plans, inserted = await _plan_and_insert(conn, rows, now, max_periods, result.parked, pricing)
    ids = {(i.subscription_id, i.period_index): i.id for i in inserted}
    credit_uses: list[renewal_repo.CreditUse] = []
    events: list[DomainEvent] = []
    for plan in plans:
        invoice_ids = [ids[(i.subscription_id, i.period_index)] for i in plan.invoices]
        credit_uses += _count_invoices(plan, invoice_ids, result)
        events.extend(renewal_rules.renewal_events(plan, invoice_ids))
        result.invoices_created += len(invoice_ids)
        result.already_invoiced += len(plan.already_invoiced)
        if plan.canceled:
            result.canceled += 1
        else:
            result.renewed_subscriptions += 1
            if plan.write.current_period_end <= now:
                result.still_due += 1
        if plan.already_invoiced:
            log.warning(
                "renewal_period_already_invoiced",
                subscription_id=plan.due.id,
                period_indexes=plan.already_invoiced,
            )
    writes = [plan.write for plan in plans]
    reserved = await renewal_repo.write_subscriptions(
        conn, writes, event_counts=outbox_repo.event_counts(events), now=now
    )
    if len(reserved) != len(writes):
        missing = sorted({w.id for w in writes} - reserved.keys())
        raise RenewalConflict(f"subscriptions changed under their row lock: {missing[:10]}")
    await renewal_repo.insert_credit_uses(conn, credit_uses, now=now)
    await write_batch_lines(conn, plans, ids)
    await outbox_repo.insert_numbered_events(conn, events, reserved, now)
    result.events = len(events)
    return result
