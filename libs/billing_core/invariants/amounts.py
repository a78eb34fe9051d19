"""Invoice amounts and credit, from PostgreSQL plus the plan history the events tell.

* ``wrong_subtotal``: a RENEWAL invoice's subtotal (and currency) is not the price of the plan
  the subscription had for that period (the subtotal less a tax added on top of the price: an
  exclusive ``TAX`` line; an inclusive one is inside the price), less the discount of the
  subscription's coupon when its redemption covers that period (percent rounded half away from
  zero, or the amount off, at most the price; ``billing_core.domain.coupons``). Plans change
  immediately (``change_plan`` updates the subscription's plan and prorates the rest of the
  current period), and only while the current period runs, so the renewal of a period that starts
  at ``t`` was priced with the plan in force just before ``t``: the new plan of the last
  ``SubscriptionPlanChanged`` whose ``changedAt`` is before ``t``, else the old plan of the first
  change, else the subscription's current plan. A change scheduled for the period end
  (``effective: period_end``) is applied by the renewer at the period boundary ``changedAt = t``
  itself, so it prices the period starting at ``t`` too (its lines, discount and tax included);
  so does a change to another billing interval, which starts a new period at its instant
  (``newPeriodStart = changedAt``, ``billing_core.domain.interval_change``).
  Changes are ordered by ``changedAt``, then by their sequence number (commit order) for
  changes at one instant (A -> B -> A at one instant ends at A); of several changes at the
  instant a period starts, the last one that prices it wins (a plain change read after a
  later one's instant, then a change to yearly billing there: the yearly plan).
  Plan changes come from the outbox and, when a topic is read, from the topic (the outbox is
  pruned after its retention; the topic keeps them as long as its own retention does). Limit:
  prices are read from the plan catalogue as it is now — a plan whose price was edited in place
  since would show its old invoices as wrong (the catalogue adds plans rather than repricing).
* ``plan_change_out_of_order``: a subscription's ``SubscriptionPlanChanged`` whose ``changedAt``
  is before the one of a change committed earlier (a lower sequence number): its history goes
  back in time, so which plan priced which period is ambiguous (a change applies at its
  request's instant or at the subscription's last write, whichever is later).
* ``wrong_amount``: ``amount <> subtotal - credit_applied``, or a negative amount or credit.
* ``credit_mismatch``: a negative credit balance, or one that is not the sum of the
  subscription's credit entries; ``credit_use_mismatch``: an invoice's ``credit_applied`` that is
  not the credit its INVOICE entries consumed.
"""

from __future__ import annotations

from collections.abc import Sequence

from billing_core.db.arrays import bool_array, instant_array, instant_sql, int_array, text_array
from billing_core.db.pg import Connection, Statement, fetch, fetchval
from billing_core.invariants.report import Check
from billing_core.invariants.topic import PlanChangeSeen

_COUNT = Statement("SELECT count(*) FROM invoice")

# Every SubscriptionPlanChanged known: the outbox's and the topic's (unnest of parallel arrays),
# one row per event.
_CHANGES = f"""
    changes AS (
        SELECT DISTINCT ON (event_id) event_id, subscription_id, sequence, changed_at, old_code,
               new_code, at_period_end
        FROM (
            SELECT CAST(event_id AS text) AS event_id, aggregate_id AS subscription_id,
                   sequence, CAST(payload ->> 'changedAt' AS timestamptz) AS changed_at,
                   payload ->> 'oldPlanCode' AS old_code, payload ->> 'newPlanCode' AS new_code,
                   coalesce(payload ->> 'effective' = 'period_end', false)
                   OR coalesce(CAST(payload ->> 'newPeriodStart' AS timestamptz)
                               = CAST(payload ->> 'changedAt' AS timestamptz), false)
                       AS at_period_end
            FROM outbox_event WHERE event_type = 'SubscriptionPlanChanged'
            UNION ALL
            SELECT t.event_id, t.subscription_id, t.sequence, {instant_sql("t.changed_at")},
                   t.old_code, t.new_code, t.at_period_end
            FROM unnest(
                CAST(:event_ids AS text)::text[], CAST(:subscription_ids AS text)::bigint[],
                CAST(:sequences AS text)::bigint[], CAST(:changed_ats AS text)::bigint[],
                CAST(:old_codes AS text)::text[], CAST(:new_codes AS text)::text[],
                CAST(:at_period_ends AS text)::boolean[])
                AS t(event_id, subscription_id, sequence, changed_at, old_code, new_code,
                     at_period_end)
        ) c
        ORDER BY event_id
    )
"""

_WRONG_SUBTOTAL = Statement(
    "WITH"
    + _CHANGES
    + """,
    -- Whether this change or one after it at the same instant prices the period starting
    -- at that instant (a scheduled change, or one that started a new period there).
    ordered AS (
        SELECT *, bool_or(at_period_end) OVER (
                      PARTITION BY subscription_id, changed_at ORDER BY sequence DESC
                  ) AS prices_from_here
        FROM changes
    ),
    -- A change applies to the periods starting after its changedAt; a scheduled one (applied at
    -- the period boundary changedAt) also to the period starting at it. Its span ends where
    -- the next change starts to apply: at the next changedAt, included when no change from the
    -- next one on at that instant prices the period starting there.
    spans AS (
        SELECT subscription_id, new_code AS code, changed_at AS since,
               at_period_end AS since_inclusive,
               lead(changed_at) OVER w AS until,
               NOT coalesce(lead(prices_from_here) OVER w, false) AS until_inclusive
        FROM ordered
        WINDOW w AS (PARTITION BY subscription_id ORDER BY changed_at, sequence)
        UNION ALL
        SELECT * FROM (
            SELECT DISTINCT ON (subscription_id) subscription_id, old_code, NULL::timestamptz,
                   false, changed_at, NOT prices_from_here
            FROM ordered ORDER BY subscription_id, changed_at, sequence
        ) first_change
    ),
    expected AS (
        SELECT i.id, i.subscription_id, i.period_index, i.currency,
               i.subtotal - coalesce((
                   SELECT sum(l.amount) FROM invoice_line l
                   WHERE l.invoice_id = i.id AND l.kind = 'TAX' AND NOT l.tax_inclusive
               ), 0) AS subtotal,
               coalesce(sp.code, current_plan.code) AS code,
               c.percent_off_bp, c.amount_off
        FROM invoice i
        JOIN subscription s ON s.id = i.subscription_id
        JOIN plan current_plan ON current_plan.id = s.plan_id
        LEFT JOIN subscription_discount d ON d.subscription_id = i.subscription_id
             AND i.period_index >= d.from_period
             AND (d.until_period IS NULL OR i.period_index < d.until_period)
        LEFT JOIN coupon c ON c.code = d.coupon_code
        LEFT JOIN spans sp ON sp.subscription_id = i.subscription_id
             AND (sp.since IS NULL OR sp.since < i.period_start
                  OR (sp.since_inclusive AND sp.since = i.period_start))
             AND (sp.until IS NULL OR i.period_start < sp.until
                  OR (sp.until_inclusive AND i.period_start = sp.until))
        WHERE i.kind = 'RENEWAL'
    )
    SELECT e.id, e.subscription_id, e.period_index, e.subtotal, e.currency, e.code,
           p.price_amount - x.off AS price_amount, p.currency AS plan_currency
    FROM expected e LEFT JOIN plan p ON p.code = e.code
    CROSS JOIN LATERAL (
        SELECT CASE
            WHEN e.percent_off_bp IS NOT NULL
                THEN least(p.price_amount, round(p.price_amount * e.percent_off_bp / 10000.0))
            WHEN e.amount_off IS NOT NULL THEN least(p.price_amount, e.amount_off)
            ELSE 0 END AS off
    ) x
    WHERE p.id IS NULL OR p.price_amount - x.off <> e.subtotal OR p.currency <> e.currency
    ORDER BY e.id
    """
)

_OUT_OF_ORDER = Statement(
    "WITH"
    + _CHANGES
    + """
    SELECT subscription_id, sequence, changed_at, earlier_latest FROM (
        SELECT subscription_id, sequence, changed_at,
               max(changed_at) OVER (PARTITION BY subscription_id ORDER BY sequence
                                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                   AS earlier_latest
        FROM changes
    ) c
    WHERE changed_at < earlier_latest
    ORDER BY subscription_id, sequence
    """
)

_WRONG_AMOUNT = Statement(
    """
    SELECT id, subtotal, credit_applied, amount FROM invoice
    WHERE amount <> subtotal - credit_applied OR amount < 0 OR credit_applied < 0
    ORDER BY id
    """
)

_CREDIT = Statement(
    """
    SELECT s.id, s.credit_balance, coalesce(c.total, 0) AS ledger
    FROM subscription s
    LEFT JOIN (SELECT subscription_id, sum(amount) AS total FROM credit_entry
               GROUP BY subscription_id) c ON c.subscription_id = s.id
    WHERE s.credit_balance < 0 OR s.credit_balance <> coalesce(c.total, 0)
    ORDER BY s.id
    """
)

_CREDIT_USE = Statement(
    """
    SELECT coalesce(i.id, c.invoice_id) AS id, i.credit_applied, coalesce(-c.used, 0) AS used
    FROM (SELECT id, credit_applied FROM invoice WHERE credit_applied <> 0) i
    FULL JOIN (SELECT invoice_id, sum(amount) AS used FROM credit_entry
               WHERE invoice_id IS NOT NULL AND reason = 'INVOICE' GROUP BY invoice_id) c
      ON c.invoice_id = i.id
    WHERE i.credit_applied IS DISTINCT FROM coalesce(-c.used, 0)
    ORDER BY 1
    """
)


async def check_amounts(conn: Connection, *, plan_changes: Sequence[PlanChangeSeen] = ()) -> Check:
    check = Check("amounts", "subtotal = plan price of the period, amount = subtotal - credit")
    check.checked = int(await fetchval(conn, _COUNT))
    params = {
        "event_ids": text_array(c.event_id for c in plan_changes),
        "subscription_ids": int_array(c.subscription_id for c in plan_changes),
        "sequences": int_array(c.sequence for c in plan_changes),
        "changed_ats": instant_array(c.changed_at for c in plan_changes),
        "old_codes": text_array(c.old_plan_code for c in plan_changes),
        "new_codes": text_array(c.new_plan_code for c in plan_changes),
        "at_period_ends": bool_array(c.prices_period_at_change for c in plan_changes),
    }
    seen: set[int] = set()
    for r in await fetch(conn, _WRONG_SUBTOTAL, params):
        if r["id"] in seen:
            continue
        seen.add(r["id"])
        expected = (
            f"plan {r['code']} is unknown"
            if r["price_amount"] is None
            else f"plan {r['code']} costs {r['price_amount']} {r['plan_currency']}"
        )
        check.add(
            "wrong_subtotal",
            "invoice",
            r["id"],
            f"subscription {r['subscription_id']} period {r['period_index']}: subtotal "
            f"{r['subtotal']} {r['currency']}, {expected}",
        )
    for r in await fetch(conn, _OUT_OF_ORDER, params):
        check.add(
            "plan_change_out_of_order",
            "subscription",
            r["subscription_id"],
            f"plan change #{r['sequence']} at {r['changed_at'].isoformat()} is before an earlier "
            f"change's {r['earlier_latest'].isoformat()}",
        )
    for r in await fetch(conn, _WRONG_AMOUNT):
        check.add(
            "wrong_amount",
            "invoice",
            r["id"],
            f"amount {r['amount']} != subtotal {r['subtotal']} - credit {r['credit_applied']}",
        )
    for r in await fetch(conn, _CREDIT):
        check.add(
            "credit_mismatch",
            "subscription",
            r["id"],
            f"credit balance {r['credit_balance']}, credit entries sum to {r['ledger']}",
        )
    for r in await fetch(conn, _CREDIT_USE):
        check.add(
            "credit_use_mismatch",
            "invoice",
            r["id"],
            f"credit applied {r['credit_applied'] or 0}, its credit entries consumed {r['used']}",
        )
    return check
