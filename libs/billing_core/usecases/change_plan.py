"""Change a subscription's plan mid-period, prorated on the time left in the current period;
to a plan with another billing interval, a new period starts at the change
(:mod:`billing_core.domain.interval_change`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from billing_core.db.pg import Connection
from billing_core.domain import events as ev
from billing_core.domain import interval_change as interval_rules
from billing_core.domain import invoice_lines
from billing_core.domain import subscription as sub_domain
from billing_core.domain.coupons import Discount, discounted_proration, plan_period_lines
from billing_core.domain.credit import apply_credit, credit_from_proration
from billing_core.domain.errors import DomainError
from billing_core.domain.period import Interval, Period
from billing_core.domain.proration import Proration
from billing_core.domain.subscription import SubscriptionStatus
from billing_core.domain.tax import TaxedLines, taxed_at
from billing_core.repo import audit
from billing_core.repo import coupons as coupons_repo
from billing_core.repo import invoice_lines as invoice_lines_repo
from billing_core.repo import invoices as invoices_repo
from billing_core.repo import plans as plans_repo
from billing_core.repo import subscriptions as subscriptions_repo
from billing_core.repo import tax as tax_repo
from billing_core.usecases.lifecycle import Decision, Outcome, change_subscription
from billing_core.usecases.period_invoice import insert_period_invoice
from billing_core.usecases.renew import renew_due_batch
from billing_core.usecases.subscribe import opened_invoice_events
from billing_core.usecases.trial_notices import send_trial_notices

# How a change is prorated: ``create_prorations`` (the rule above), ``none`` (no invoice, no
# credit: the new price applies from the next renewal).
PRORATION_CREATE = "create_prorations"
PRORATION_NONE = "none"
# ``always_invoice`` (Stripe's: create prorations and invoice them at once): an upgrade is
# invoiced now, as with ``create_prorations``; a downgrade's credit is applied now to the OPEN
# invoices whose collection never started (oldest first; one paid in full becomes PAID), and
# only what is left stays on the balance for later invoices.
PRORATION_ALWAYS = "always_invoice"
# When a change applies: now (prorated as above), or at the current period's end (stored on the
# subscription; the renewer applies it when it renews, and the new period is the first one
# invoiced at the new plan).
EFFECTIVE_NOW = "now"
EFFECTIVE_PERIOD_END = "period_end"

# Periods a plan change renews before it applies (the renewer's default per batch); a
# subscription further behind is left to the renewer and the change answers 409 meanwhile.
MAX_CATCH_UP = 24


class IncompatiblePlanChange(DomainError):
    """The new plan bills in another currency, or at another interval while that cannot start a
    new period (collection paused)."""


@dataclass(frozen=True)
class PlanChange:
    changed: bool
    due: int = 0
    invoice_id: int | None = None
    credit_granted: int = 0
    invoice_amount: int = 0
    scheduled: bool = False  # stored for the period end, not applied now
    # A plan with another interval: the new period's RENEWAL invoice and what it charges once
    # the credit balance paid its part (invoice_id stays None: no PRORATION invoice).
    period_invoice_id: int | None = None
    period_invoice_amount: int = 0


async def _renewed_if_due(
    conn: Connection, sub: subscriptions_repo.Subscription, now: datetime
) -> subscriptions_repo.Subscription:
    """``sub`` renewed first when its period (or its trial) ended and the renewer has not run
    yet (with the renewer's own code), so the change is prorated in the period it falls in: a
    trial that is over is a paid period 0 at the old plan from its end, not a trial any more."""
    due = sub.status in (SubscriptionStatus.ACTIVE, SubscriptionStatus.TRIALING)
    if not due or sub.current_period_end > now:
        return sub
    if sub.status == SubscriptionStatus.TRIALING:  # its notice comes first, as in the renewer
        await send_trial_notices(conn, now=now, limit=1, only_id=sub.id)
    await renew_due_batch(conn, now=now, batch_size=1, max_periods=MAX_CATCH_UP, only_id=sub.id)
    return await subscriptions_repo.get(conn, sub.id)


def _proration(
    sub: subscriptions_repo.Subscription,
    new_price: int,
    now: datetime,
    behavior: str,
    discount: Discount | None,
) -> Proration:
    if behavior == PRORATION_NONE or sub.status == SubscriptionStatus.TRIALING:
        # No proration asked for, or nothing charged yet (a trial): the new plan is simply the
        # one the next renewal invoices.
        return Proration(credit=0, charge=0, due=0)
    # Between the discounted prices when the subscription's coupon covers this period: the
    # unused time is credited at what it cost (billing_core.domain.coupons).
    return discounted_proration(
        sub.plan_price_amount,
        new_price,
        Period(sub.current_period_start, sub.current_period_end),
        now,
        discount=discount,
        period_index=sub.period_index,
    )


async def change_plan(
    conn: Connection,
    *,
    subscription_id: int,
    plan_code: str,
    now: datetime,
    expected_version: int | None = None,
    actor: audit.Actor | None = None,
    proration_behavior: str = PRORATION_CREATE,
    effective: str = EFFECTIVE_NOW,
) -> PlanChange:
    """Switch to ``plan_code`` at ``now`` (``effective`` ``period_end``: see
    :func:`schedule_change`). A change scheduled for the period end is dropped: this one
    replaces it.

    ``prorate`` over the current period (between the discounted prices while the
    subscription's coupon covers it) gives ``due``: positive (upgrade) becomes a PRORATION
    invoice for [now, period end) — its lines taxed at the subscription's rate if it has a tax
    location —, paid first from the credit balance and collected like any other; negative
    (downgrade) becomes credit for later invoices. The same plan is a no-op. A plan with
    another billing interval starts a new period now instead (:func:`_change_interval`).
    With ``actor``, the request is recorded in ``audit_event`` (changed or not).
    """

    async def decide(sub: subscriptions_repo.Subscription, now: datetime) -> Decision[PlanChange]:
        new_plan = await plans_repo.get_by_code(conn, plan_code)
        if effective == EFFECTIVE_PERIOD_END:
            return _schedule(sub, new_plan, now)
        state = subscriptions_repo.domain_state(sub)
        if new_plan.code == sub.plan_code:
            sub_domain.change_plan(state, new_plan.code, now)  # a canceled subscription refuses
            unchanged = PlanChange(changed=False)
            return Decision(Outcome(unchanged, (), _detail(sub, new_plan.code, unchanged)))
        if sub.status == SubscriptionStatus.CANCELED:
            sub_domain.change_plan(state, new_plan.code, now)  # raises SubscriptionCanceledError
        _require_same_currency(sub, new_plan)
        discount = (await coupons_repo.discounts_for(conn, [sub.id])).get(sub.id)
        in_trial = sub.status == SubscriptionStatus.TRIALING
        if new_plan.billing_interval != sub.plan_interval and not in_trial:
            # In a trial nothing was charged and the trial ends at the anchor: the new plan's
            # interval simply counts from there. Otherwise a new period starts now.
            return await _change_interval(conn, sub, new_plan, now, proration_behavior, discount)
        return await _prorate(conn, sub, new_plan, now, proration_behavior, discount)

    async def renewed_if_due(
        sub: subscriptions_repo.Subscription, now: datetime
    ) -> subscriptions_repo.Subscription:
        return await _renewed_if_due(conn, sub, now)

    return await change_subscription(
        conn,
        decide,
        subscription_id=subscription_id,
        action=audit.SUBSCRIPTION_SCHEDULE_PLAN_CHANGE
        if effective == EFFECTIVE_PERIOD_END
        else audit.SUBSCRIPTION_CHANGE_PLAN,
        now=now,
        expected_version=expected_version,
        actor=actor,
        refresh=renewed_if_due,
    )


async def _prorate(
    conn: Connection,
    sub: subscriptions_repo.Subscription,
    new_plan: plans_repo.Plan,
    now: datetime,
    behavior: str,
    discount: Discount | None,
) -> Decision[PlanChange]:
    """A plan with the same interval: prorated over the current period (see :func:`change_plan`)."""
    proration = _proration(sub, new_plan.price_amount, now, behavior, discount)
    balance = sub.credit_balance
    credit_granted = 0
    credit_used = 0
    priced: TaxedLines | None = None
    if proration.due > 0:
        # The change's lines, taxed at the subscription's rate (if it has a tax location);
        # the credit balance pays the taxed amount.
        rate = (await tax_repo.rates_for(conn, [sub.id])).get(sub.id)
        priced = taxed_at(
            rate,
            invoice_lines.proration_lines(
                sub.plan_code, new_plan.code, proration, now, sub.current_period_end, 0
            ),
        )
        split = apply_credit(priced.total, balance)
        credit_used = split.credit_used
        balance = split.credit_remaining
    elif proration.due < 0:
        credit_granted = credit_from_proration(proration.due)
        balance += credit_granted
    _new_state, events = sub_domain.change_plan(
        subscriptions_repo.domain_state(sub), new_plan.code, now, proration_due=proration.due
    )

    async def write(_version: int, decided: Outcome[PlanChange]) -> Outcome[PlanChange]:
        events = list(decided.events)
        invoice: invoices_repo.Invoice | None = None
        if priced is not None:
            invoice = await _insert_proration_invoice(conn, sub, new_plan, priced, credit_used, now)
            events += opened_invoice_events(invoice, priced.tax)
        elif credit_granted:
            await subscriptions_repo.add_credit_entry(
                conn,
                subscription_id=sub.id,
                amount=credit_granted,
                reason="DOWNGRADE",
                now=now,
            )
            if behavior == PRORATION_ALWAYS:
                events += await _apply_credit_now(conn, sub.id, credit_granted, now)
        change = PlanChange(
            changed=True,
            due=proration.due,
            invoice_id=invoice.id if invoice else None,
            credit_granted=credit_granted,
            invoice_amount=invoice.amount if invoice else 0,
        )
        return Outcome(change, events, _detail(sub, new_plan.code, change))

    values = {"plan_id": new_plan.id, "credit_balance": balance, "scheduled_plan_id": None}
    return Decision(Outcome(PlanChange(changed=True), events), values, write)


async def _insert_proration_invoice(
    conn: Connection,
    sub: subscriptions_repo.Subscription,
    new_plan: plans_repo.Plan,
    priced: TaxedLines,
    credit_used: int,
    now: datetime,
) -> invoices_repo.Invoice:
    """The PRORATION invoice of an upgrade for [now, period end), its lines checked, and the
    credit it consumed on the ledger."""
    invoice = await invoices_repo.insert_invoice(
        conn,
        subscription_id=sub.id,
        customer_id=sub.customer_id,
        kind="PRORATION",
        period_index=sub.period_index,
        period_start=now,
        period_end=sub.current_period_end,
        subtotal=priced.total,
        credit_applied=credit_used,
        currency=new_plan.currency,
        now=now,
    )
    lines = [*priced.lines, *invoice_lines.credit_line(credit_used)]
    invoice_lines.check_total(
        lines,
        subtotal=invoice.subtotal,
        credit_applied=invoice.credit_applied,
        amount=invoice.amount,
    )
    await invoice_lines_repo.insert_lines(conn, [(invoice.id, lines)])
    if credit_used:
        await subscriptions_repo.add_credit_entry(
            conn,
            subscription_id=sub.id,
            amount=-credit_used,
            reason="INVOICE",
            invoice_id=invoice.id,
            now=now,
        )
    return invoice


async def _apply_credit_now(
    conn: Connection, subscription_id: int, credit: int, now: datetime
) -> list[ev.DomainEvent]:
    """``always_invoice`` on a downgrade: the credit just granted pays the OPEN invoices whose
    collection never started, at once (the subscription row is already locked and versioned by
    this change); each gets a CREDIT_APPLIED line for the credit it took (its amount still the
    sum of its lines, checked as they are written); InvoicePaid for each one paid in full."""
    applied = await invoices_repo.apply_credit_to_open(conn, subscription_id, credit, now=now)
    events: list[ev.DomainEvent] = []
    for use in applied:
        await invoice_lines_repo.append_lines(
            conn, use.invoice_id, invoice_lines.credit_line(use.used)
        )
        await subscriptions_repo.add_credit_entry(
            conn,
            subscription_id=subscription_id,
            amount=-use.used,
            reason="INVOICE",
            invoice_id=use.invoice_id,
            now=now,
        )
        if use.amount_left == 0:
            events.append(ev.invoice_paid(subscription_id, use.invoice_id, 0, use.currency, now))
    used = sum(use.used for use in applied)
    if used:
        await subscriptions_repo.consume_credit(conn, subscription_id, used, now=now)
    return events


def _require_same_currency(sub: subscriptions_repo.Subscription, new_plan: plans_repo.Plan) -> None:
    if new_plan.currency != sub.plan_currency:
        raise IncompatiblePlanChange(
            f"plan {new_plan.code} is billed in {new_plan.currency}, "
            f"the subscription in {sub.plan_currency}"
        )


async def _change_interval(
    conn: Connection,
    sub: subscriptions_repo.Subscription,
    new_plan: plans_repo.Plan,
    now: datetime,
    behavior: str,
    discount: Discount | None,
) -> Decision[PlanChange]:
    """A plan with another interval, now: the anchor moves to ``now`` and period n + 1 starts
    there (:func:`billing_core.domain.interval_change.change_interval`). The unused part of
    period n becomes credit (none with ``prorationBehavior: none``; a DOWNGRADE credit entry),
    and the new period's RENEWAL invoice — the new plan's period less the coupon's discount
    when it covers n + 1, taxed at the subscription's rate — takes the credit balance first and
    is collected like any renewal. ``always_invoice``: what credit is left then pays the OPEN
    invoices whose collection never started, at once."""
    if sub.pause_behavior is not None:
        raise IncompatiblePlanChange(
            f"plan {new_plan.code} renews every {new_plan.billing_interval}: a change to "
            "another interval starts a new period, which cannot be done while collection is "
            "paused (resume first, or schedule the change for the period end)"
        )
    change = interval_rules.change_interval(
        subscriptions_repo.domain_state(sub),
        interval_rules.CurrentPeriod(
            index=sub.period_index,
            period=Period(sub.current_period_start, sub.current_period_end),
            price=sub.plan_price_amount,
            time_zone=sub.time_zone,
        ),
        new_plan_code=new_plan.code,
        new_price=new_plan.price_amount,
        new_interval=Interval(new_plan.billing_interval),
        at=now,
        discount=discount,
        credit_unused=behavior != PRORATION_NONE,
    )
    period, index = change.new_period, change.anchor_period_index
    rate = (await tax_repo.rates_for(conn, [sub.id])).get(sub.id)
    priced = taxed_at(
        rate, plan_period_lines(new_plan.code, new_plan.price_amount, discount, index, period)
    )
    split = apply_credit(priced.total, sub.credit_balance + change.credit)

    async def write(_version: int, decided: Outcome[PlanChange]) -> Outcome[PlanChange]:
        if change.credit:
            await subscriptions_repo.add_credit_entry(
                conn, subscription_id=sub.id, amount=change.credit, reason="DOWNGRADE", now=now
            )
        invoice = await insert_period_invoice(
            conn,
            sub,
            period_index=index,
            period=period,
            priced=priced,
            split=split,
            currency=new_plan.currency,
            now=now,
        )
        events = [*decided.events, *opened_invoice_events(invoice, priced.tax)]
        if behavior == PRORATION_ALWAYS and split.credit_remaining:
            events += await _apply_credit_now(conn, sub.id, split.credit_remaining, now)
        result = PlanChange(
            changed=True,
            due=-change.credit,
            credit_granted=change.credit,
            period_invoice_id=invoice.id,
            period_invoice_amount=invoice.amount,
        )
        return Outcome(result, events, _detail(sub, new_plan.code, result))

    values = {
        "plan_id": new_plan.id,
        "scheduled_plan_id": None,
        "billing_anchor": change.anchor,
        "anchor_period_index": index,
        "period_index": index,
        "current_period_start": period.start,
        "current_period_end": period.end,
        "credit_balance": split.credit_remaining,
    }
    return Decision(Outcome(PlanChange(changed=True), change.events), values, write)


def _schedule(
    sub: subscriptions_repo.Subscription, new_plan: plans_repo.Plan | None, now: datetime
) -> Decision[PlanChange]:
    """Store (or, ``new_plan`` None or the current plan, drop) the change scheduled for the
    period end; nothing is prorated or invoiced now."""
    state = subscriptions_repo.domain_state(sub)
    code = None if new_plan is None else new_plan.code
    new_state, _ = sub_domain.schedule_plan_change(state, code, now)
    if new_plan is not None and new_state.scheduled_plan_code is not None:
        # Another interval is fine: the renewer moves the anchor to the boundary.
        _require_same_currency(sub, new_plan)
    changed = new_state != state
    detail = {
        "fromPlan": sub.plan_code,
        "scheduledPlan": new_state.scheduled_plan_code,
        "effectiveAt": sub.current_period_end.isoformat(),
        "changed": changed,
    }
    result = PlanChange(changed=changed, scheduled=new_state.scheduled_plan_code is not None)
    scheduled = None if new_state.scheduled_plan_code is None or new_plan is None else new_plan.id
    values = {"scheduled_plan_id": scheduled} if changed else None
    return Decision(Outcome(result, (), detail), values)


async def cancel_scheduled_change(
    conn: Connection,
    *,
    subscription_id: int,
    now: datetime,
    expected_version: int | None = None,
    actor: audit.Actor | None = None,
) -> bool:
    """Drop the plan change scheduled for the period end; False when none was."""

    async def decide(sub: subscriptions_repo.Subscription, now: datetime) -> Decision[PlanChange]:
        return _schedule(sub, None, now)

    change = await change_subscription(
        conn,
        decide,
        subscription_id=subscription_id,
        action=audit.SUBSCRIPTION_SCHEDULE_PLAN_CHANGE,
        now=now,
        expected_version=expected_version,
        actor=actor,
    )
    return change.changed


def _detail(
    sub: subscriptions_repo.Subscription, plan_code: str, change: PlanChange
) -> dict[str, object]:
    return {
        "fromPlan": sub.plan_code,
        "toPlan": plan_code,
        "changed": change.changed,
        "due": change.due,
        "invoiceId": change.invoice_id,
        "creditGranted": change.credit_granted,
        "periodInvoiceId": change.period_invoice_id,
    }
