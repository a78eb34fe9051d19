"""No invoice left behind: an OPEN invoice is always due again soon.

The collector leases an invoice by pushing ``next_attempt_at`` forward by its lease before the
gateway call; an uncertain answer retries 15 minutes later; dunning schedules days ahead. So an
OPEN invoice whose ``next_attempt_at`` is further in the past than ``retry_bound`` (default: the
15-minute retry plus the collector's default lease) was dropped by everyone
(``stuck_invoice``), and one without any ``next_attempt_at`` will never be tried
(``unscheduled_invoice``) unless it was held on purpose and announced (an attempt whose answers
stayed uncertain: PaymentReconciliationNeeded). The invoices of a paused subscription wait on
purpose until it resumes (the collector leaves them alone): not stuck. Relative to the ``now``
given.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta

from billing_core.db.arrays import int_array
from billing_core.db.pg import Connection, Statement, fetch, fetchval
from billing_core.invariants.report import Check

DEFAULT_RETRY_BOUND = timedelta(minutes=15) + timedelta(seconds=120)

_OPEN = Statement("SELECT count(*) FROM invoice WHERE status = 'OPEN'")
_STUCK = Statement(
    """
    SELECT i.id, i.next_attempt_at, i.leased_at, i.attempt_count,
           (i.id = ANY(CAST(:reconciled AS text)::bigint[]) OR EXISTS (
                SELECT 1 FROM outbox_event o
                WHERE o.aggregate_id = i.subscription_id
                  AND o.event_type = 'PaymentReconciliationNeeded'
                  AND o.payload ->> 'invoiceId' = CAST(i.id AS text))) AS reconciled
    FROM invoice i
    WHERE i.status = 'OPEN' AND (i.next_attempt_at IS NULL OR i.next_attempt_at < :cutoff)
      AND NOT EXISTS (SELECT 1 FROM subscription s
                      WHERE s.id = i.subscription_id AND s.paused_at IS NOT NULL)
    ORDER BY i.id
    """
)


async def check_stuck(
    conn: Connection,
    *,
    now: datetime,
    retry_bound: timedelta,
    reconciled: Collection[int] = (),
) -> Check:
    check = Check("stuck", f"no OPEN invoice overdue by more than {retry_bound}")
    check.checked = int(await fetchval(conn, _OPEN))
    held = 0
    params = {"cutoff": now - retry_bound, "reconciled": int_array(sorted(reconciled))}
    for r in await fetch(conn, _STUCK, params):
        if r["next_attempt_at"] is None and r["reconciled"]:
            held += 1  # held on purpose, announced by PaymentReconciliationNeeded
        elif r["next_attempt_at"] is None:
            check.add("unscheduled_invoice", "invoice", r["id"], "OPEN with no next attempt")
        else:
            check.add(
                "stuck_invoice",
                "invoice",
                r["id"],
                f"OPEN, due since {r['next_attempt_at']} (last leased {r['leased_at']}, "
                f"{r['attempt_count']} declines)",
            )
    if held:
        check.notes.append(f"{held} OPEN invoices held for reconciliation (uncertain results)")
    return check
