"""Nothing collected while paused: the invoices of paused subscriptions and paused periods.

A pause leaves the periods alone (``periods`` still checks them: contiguous, one renewal each),
but while a subscription is paused the renewer creates the renewal of every period starting
before the pause's ``resumesAt`` VOID or DRAFT, and the collector claims none of its invoices.
So, from the database:

* ``paused_period_collectible``: a subscription paused now has a RENEWAL invoice for a period
  that started during the pause (after ``paused_at``, before ``resumesAt``) that is
  neither VOID nor DRAFT;
* ``draft_collected``: a DRAFT invoice that is scheduled for a charge, or has a payment attempt
  (a DRAFT is never collected, paused or not);
* ``charged_while_paused``: a payment attempt recorded for an invoice of a subscription paused
  now, later than ``grace`` after the pause began — a gateway call claimed just before the
  pause ends normally within the collector's lease, which ``grace`` must cover.

Limit: pauses that have ended are no longer in the database (only in their SubscriptionPaused /
SubscriptionResumed events); the invoices they produced are still checked by ``draft_collected``
and, being VOID or DRAFT, can be charged by nothing.
"""

from __future__ import annotations

from datetime import timedelta

from billing_core.db.pg import Connection, Statement, fetch, fetchval
from billing_core.invariants.report import Check

DEFAULT_PAUSE_GRACE = timedelta(minutes=5)

_COUNT = Statement("SELECT count(*) FROM subscription WHERE paused_at IS NOT NULL")

_PAUSED_PERIODS = Statement(
    """
    SELECT i.id, i.subscription_id, i.period_index, i.status, s.paused_at, s.pause_resumes_at
    FROM subscription s
    JOIN invoice i ON i.subscription_id = s.id AND i.kind = 'RENEWAL'
    WHERE s.paused_at IS NOT NULL AND i.period_start > s.paused_at
      AND (s.pause_resumes_at IS NULL OR i.period_start < s.pause_resumes_at)
      AND i.status NOT IN ('VOID', 'DRAFT')
    ORDER BY i.id
    """
)

_DRAFTS = Statement(
    """
    SELECT i.id, i.next_attempt_at,
           (SELECT count(*) FROM payment_attempt a WHERE a.invoice_id = i.id) AS attempts
    FROM invoice i
    WHERE i.status = 'DRAFT' AND (i.next_attempt_at IS NOT NULL
          OR EXISTS (SELECT 1 FROM payment_attempt a WHERE a.invoice_id = i.id))
    ORDER BY i.id
    """
)

_CHARGED = Statement(
    """
    SELECT a.invoice_id, a.id AS attempt_id, a.outcome, a.recorded_at, s.id AS subscription_id,
           s.paused_at
    FROM subscription s
    JOIN invoice i ON i.subscription_id = s.id
    JOIN payment_attempt a ON a.invoice_id = i.id
    WHERE s.paused_at IS NOT NULL AND a.source <> 'IMPORT'
      AND a.recorded_at > s.paused_at + make_interval(secs => CAST(:grace_s AS double precision))
    ORDER BY a.id
    """
)


async def check_pauses(conn: Connection, *, grace: timedelta = DEFAULT_PAUSE_GRACE) -> Check:
    check = Check(
        "pauses", "no paused period collectible, no DRAFT charged, no charge while paused"
    )
    check.checked = int(await fetchval(conn, _COUNT))
    check.notes.append(f"{check.checked} subscriptions paused")
    for r in await fetch(conn, _PAUSED_PERIODS):
        check.add(
            "paused_period_collectible",
            "invoice",
            r["id"],
            f"subscription {r['subscription_id']} paused since {r['paused_at']} (until "
            f"{r['pause_resumes_at']}), period {r['period_index']}'s renewal is {r['status']}",
        )
    for r in await fetch(conn, _DRAFTS):
        check.add(
            "draft_collected",
            "invoice",
            r["id"],
            f"DRAFT, next attempt {r['next_attempt_at']}, {r['attempts']} payment attempts",
        )
    for r in await fetch(conn, _CHARGED, {"grace_s": grace.total_seconds()}):
        check.add(
            "charged_while_paused",
            "invoice",
            r["invoice_id"],
            f"subscription {r['subscription_id']} paused since {r['paused_at']}: attempt "
            f"{r['attempt_id']} ({r['outcome']}) recorded {r['recorded_at']}",
        )
    return check
