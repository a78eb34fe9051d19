"""Never skip a period, never invoice one twice: the renewal invoices of every subscription.

The rule, from how invoices are created:

* subscribing creates the subscription with ``period_index = 0`` and, in the same transaction,
  the RENEWAL invoice of period 0 (``billing_core.usecases.subscribe``);
* when period n ends, the renewer (ACTIVE subscriptions only) either renews — it creates the
  RENEWAL invoice of period n+1 and sets ``period_index = n+1`` with that period's bounds, in
  one transaction, one period at a time when catching up — or, with ``cancel_at_period_end``,
  cancels without creating an invoice;
* cancelling, dunning (PAST_DUE) and plan changes never move ``period_index`` — except a
  change to a plan with another billing interval (``billing_core.domain.interval_change``):
  it starts period n+1 at its instant and creates that period's RENEWAL invoice in the same
  transaction. Period n is cut short there (its unused part was credited), so period n+1
  starts inside period n: an overlap that is not one when a SubscriptionPlanChanged started a
  new period at that instant (``newPeriodStart``, from the outbox or the topic) or the
  subscription's billing anchor is that instant (``anchor_period_index > 0``: the latest such
  change, which needs no event);
* a subscription with a trial is created TRIALING with no invoice: its current period is the
  trial, ending at ``trial_end`` (its billing anchor), with ``period_index = 0``. When the trial
  ends (the renewer, or ``end-trial``) period 0 is invoiced and becomes the current period in
  one transaction — or, with a cancel scheduled during the trial, it is CANCELED with nothing
  invoiced. A trial canceled now is CANCELED with nothing invoiced too.

So at any moment every subscription, whatever its status, has exactly one RENEWAL invoice for
each period 0..``period_index`` and none beyond; consecutive ones are contiguous in time (the
end of period n is the start of period n+1) and the one of ``period_index`` has the
subscription's current bounds — except while the current period is the trial
(``current_period_end = trial_end``: TRIALING, or CANCELED during the trial), when it has no
RENEWAL invoice at all (kind ``trial_invoiced``), and a TRIALING subscription whose current
period is not its trial is ``trial_mismatch``. A CANCELED subscription keeps the
``period_index`` of its last period, so it is checked up to that one. A PAST_DUE
subscription is not renewed until it is ACTIVE again (then the renewer catches up), so only an
ACTIVE one whose period ended (or a TRIALING one whose trial ended) longer ago than
``renewal_tolerance`` counts as overdue — a renewal that should have happened and did not
(kind ``renewal_overdue``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from billing_core.db.arrays import instant_array, instant_sql, int_array
from billing_core.db.pg import Connection, Statement, fetch
from billing_core.invariants.report import Check
from billing_core.invariants.topic import PlanChangeSeen

_COUNTS = Statement(
    "SELECT (SELECT count(*) FROM subscription) AS subscriptions, "
    "(SELECT count(*) FROM invoice WHERE kind = 'RENEWAL') AS renewals"
)

# Two renewals for one period, whether they agree on its start (the unique index) or not.
_DUPLICATES = Statement(
    """
    SELECT subscription_id, 'period ' || period_index AS period, array_agg(id ORDER BY id) AS ids
    FROM invoice WHERE kind = 'RENEWAL'
    GROUP BY subscription_id, period_index HAVING count(*) > 1
    UNION ALL
    SELECT subscription_id, 'start ' || period_start AS period, array_agg(id ORDER BY id)
    FROM invoice WHERE kind = 'RENEWAL'
    GROUP BY subscription_id, period_start HAVING count(DISTINCT period_index) > 1
    ORDER BY 1
    """
)

# Consecutive renewals (by period index) that skip an index or leave a hole or an overlap; a
# period that starts inside the one before at a change to another interval (a restart: from the
# outbox, the topic, or the subscription's moved anchor) cuts that one short and is no overlap.
_DISCONTINUITIES = Statement(
    f"""
    WITH restarts AS (
        SELECT aggregate_id AS subscription_id,
               CAST(payload ->> 'newPeriodStart' AS timestamptz) AS at
        FROM outbox_event
        WHERE event_type = 'SubscriptionPlanChanged' AND payload ->> 'newPeriodStart' IS NOT NULL
        UNION
        SELECT x.id, {instant_sql("x.at")}
        FROM unnest(CAST(:restart_subscriptions AS text)::bigint[],
                    CAST(:restart_ats AS text)::bigint[]) AS x(id, at)
        UNION
        SELECT id, billing_anchor FROM subscription WHERE anchor_period_index > 0
    )
    SELECT subscription_id, prev_index, period_index, prev_end, period_start FROM (
        SELECT subscription_id, period_index, period_start,
               lag(period_index) OVER w AS prev_index, lag(period_end) OVER w AS prev_end,
               lag(period_start) OVER w AS prev_start
        FROM invoice WHERE kind = 'RENEWAL'
        WINDOW w AS (PARTITION BY subscription_id ORDER BY period_index, id)
    ) r
    WHERE prev_index IS NOT NULL AND period_index <> prev_index
      AND (period_index <> prev_index + 1 OR period_start <> prev_end)
      AND NOT (period_index = prev_index + 1
               AND prev_start < period_start AND period_start < prev_end
               AND EXISTS (SELECT 1 FROM restarts x
                           WHERE x.subscription_id = r.subscription_id
                             AND x.at = r.period_start))
    ORDER BY subscription_id, period_index
    """
)

# Each subscription against its renewals: from period 0 to its current period, current bounds.
_COVERAGE = Statement(
    """
    SELECT s.id, s.status, s.period_index, s.current_period_start, s.current_period_end,
           r.first, r.last, r.n, c.period_start AS cur_start, c.period_end AS cur_end,
           t.in_trial
    FROM subscription s
    CROSS JOIN LATERAL (
        SELECT s.trial_end IS NOT NULL AND s.current_period_end = s.trial_end
               AND s.period_index = 0 AS in_trial
    ) t
    LEFT JOIN (
        SELECT subscription_id, min(period_index) AS first, max(period_index) AS last,
               count(DISTINCT period_index) AS n
        FROM invoice WHERE kind = 'RENEWAL' GROUP BY subscription_id
    ) r ON r.subscription_id = s.id
    LEFT JOIN invoice c
      ON c.subscription_id = s.id AND c.kind = 'RENEWAL' AND c.period_index = s.period_index
    WHERE (t.in_trial AND r.n IS NOT NULL)
       OR (s.status = 'TRIALING' AND NOT t.in_trial)
       OR (NOT t.in_trial AND (
           r.n IS NULL OR r.first <> 0 OR r.last <> s.period_index
           OR r.n <> s.period_index + 1
           OR c.period_start IS DISTINCT FROM s.current_period_start
           OR c.period_end IS DISTINCT FROM s.current_period_end))
    ORDER BY s.id
    """
)

_OVERDUE = Statement(
    """
    SELECT id, status, period_index, current_period_end FROM subscription
    WHERE status IN ('ACTIVE', 'TRIALING') AND current_period_end < :cutoff
    ORDER BY id
    """
)


async def check_periods(
    conn: Connection,
    *,
    now: datetime,
    renewal_tolerance: timedelta,
    plan_changes: Sequence[PlanChangeSeen] = (),
) -> Check:
    check = Check(
        "periods",
        "one RENEWAL invoice per period 0..current, contiguous; no ACTIVE renewal overdue",
    )
    counts = (await fetch(conn, _COUNTS))[0]
    check.checked = int(counts["subscriptions"])
    check.notes.append(f"{counts['renewals']} renewal invoices")

    for r in await fetch(conn, _DUPLICATES):
        check.add(
            "duplicate_renewal",
            "subscription",
            r["subscription_id"],
            f"{len(r['ids'])} renewal invoices for {r['period']}: {list(r['ids'])}",
        )
    restarts = [c for c in plan_changes if c.new_period_start is not None]
    params = {
        "restart_subscriptions": int_array(c.subscription_id for c in restarts),
        "restart_ats": instant_array(c.new_period_start for c in restarts),
    }
    for r in await fetch(conn, _DISCONTINUITIES, params):
        if r["period_index"] != r["prev_index"] + 1:
            missing = f"periods {r['prev_index'] + 1}..{r['period_index'] - 1} have no invoice"
            check.add("period_gap", "subscription", r["subscription_id"], missing)
        elif r["period_start"] > r["prev_end"]:
            check.add(
                "period_gap",
                "subscription",
                r["subscription_id"],
                f"period {r['prev_index']} ends {r['prev_end']}, period {r['period_index']} starts "
                f"{r['period_start']}",
            )
        else:
            check.add(
                "period_overlap",
                "subscription",
                r["subscription_id"],
                f"period {r['period_index']} starts {r['period_start']}, before period "
                f"{r['prev_index']} ends ({r['prev_end']})",
            )
    seen: set[int] = set()
    for r in await fetch(conn, _COVERAGE):
        if r["id"] in seen:  # several invoices for the current period: reported above
            continue
        seen.add(r["id"])
        _coverage(check, r)
    cutoff = now - renewal_tolerance
    for r in await fetch(conn, _OVERDUE, {"cutoff": cutoff}):
        check.add(
            "renewal_overdue",
            "subscription",
            r["id"],
            f"{r['status']}, period {r['period_index']} ended {r['current_period_end']}, "
            f"not renewed within {renewal_tolerance}",
        )
    return check


def _coverage(check: Check, r: Mapping[str, Any]) -> None:
    sub: int = r["id"]
    index: int = r["period_index"]
    first, last, n = r["first"], r["last"], r["n"]
    if r["in_trial"]:
        check.add(
            "trial_invoiced",
            "subscription",
            sub,
            f"{r['status']} in its trial (until {r['current_period_end']}), but renewal invoices "
            f"exist for periods {first}..{last}",
        )
        return
    if r["status"] == "TRIALING":
        check.add(
            "trial_mismatch",
            "subscription",
            sub,
            f"TRIALING, but its current period {index} "
            f"({r['current_period_start']}..{r['current_period_end']}) is not its trial",
        )
        return
    if n is None:
        check.add("period_gap", "subscription", sub, f"current period {index}, no renewal invoice")
        return
    if first != 0:
        check.add("period_gap", "subscription", sub, f"periods 0..{first - 1} have no invoice")
    if last < index:
        check.add("period_gap", "subscription", sub, f"periods {last + 1}..{index} have no invoice")
    elif last > index:
        check.add(
            "invoice_ahead",
            "subscription",
            sub,
            f"current period {index}, but a renewal invoice exists for period {last}",
        )
    if last == index and (
        r["cur_start"] != r["current_period_start"] or r["cur_end"] != r["current_period_end"]
    ):
        check.add(
            "period_mismatch",
            "subscription",
            sub,
            f"current period {index} is {r['current_period_start']}..{r['current_period_end']}, "
            f"its invoice {r['cur_start']}..{r['cur_end']}",
        )
