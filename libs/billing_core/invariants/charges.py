"""Never charge twice: successful gateway charges per invoice, from the gateway's own ledger.

A SUCCESS payment attempt with source ``IMPORT`` is a payment made before (outside) this system,
imported with the history (``billing seed``, a migration): it counts as one successful charge
that the gateway ledger cannot show. So with a ledger (the gateway's evidence, independent of
the database), counting each invoice's gateway charges plus its imported payment:

* ``double_charge``: an invoice that keeps more than one successful charge, over all its keys
  (``inv-{id}-try-{n}``) and an imported payment, or one the gateway's own audit lists as such
  — a charge with a refund (``refund`` row, requested or made) is given back, so a PAID invoice
  charged twice with one refund is not a double charge;
* ``paid_without_charge``: a PAID invoice with an amount > 0 and no successful charge;
* ``charged_not_paid``: money kept for an invoice the database does not hold as PAID (a VOID or
  FAILED one: every charge must have a refund), unless a reconciliation item (open, or resolved
  by a person) or a ``PaymentReconciliationNeeded`` event (outbox or topic) records it, or the
  invoice is OPEN and still leased (``next_attempt_at > now``: the collector is recording that
  very call — counted in the notes);
* ``charge_unknown_invoice``: a successful charge for an invoice the database does not have.

Without a ledger the payment attempts stand in for it (the database's own audit trail): a PAID
invoice with an amount > 0 needs a SUCCESS attempt (an imported one counts). In both cases more
than one idempotency key recording a SUCCESS for one invoice is a ``double_charge_recorded``
(an imported payment has its own key, ``import-inv-{id}``) — but a success that was rejected
(a MISMATCH: another amount or currency, an attempt never made, or held for a person with a
reconciliation item of its key) or whose charge is refunded is not one the invoice kept.

``since``: history before it is taken as given — an invoice PAID before it needs no charge.
A ledger that began after an invoice was PAID (a simulator restarted since: its ledger starts
empty with the process) cannot vouch for that payment: such invoices are checked against the
payment attempts instead, as without a ledger. Double charges and charges without payment are
checked whatever their time.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from datetime import datetime
from typing import Any

from billing_core.db.arrays import int_array
from billing_core.db.pg import Connection, Statement, fetch, fetchval
from billing_core.domain.invoice import InvoiceStatus
from billing_core.invariants.ledger import LedgerEvidence
from billing_core.invariants.report import Check

_INVOICES = Statement("SELECT count(*) FROM invoice")

_RECONCILED = """
    reconciled AS (
        SELECT CAST(payload ->> 'invoiceId' AS bigint) AS invoice_id FROM outbox_event
        WHERE event_type = 'PaymentReconciliationNeeded'
        UNION
        SELECT unnest(CAST(:reconciled AS text)::bigint[])
    )
"""

_AGAINST_LEDGER = Statement(
    f"""
    WITH ledger AS (
        SELECT * FROM unnest(CAST(:invoice_ids AS text)::bigint[], CAST(:counts AS text)::int[])
            AS l(invoice_id, n)
    ),
    imported AS (
        SELECT DISTINCT invoice_id FROM payment_attempt
        WHERE source = 'IMPORT' AND outcome = 'SUCCESS'
    ), {_RECONCILED},
    evidence AS (
        SELECT coalesce(i.id, l.invoice_id) AS id, i.status, i.amount, i.paid_at,
               i.next_attempt_at, coalesce(l.n, 0) AS n, m.invoice_id IS NOT NULL AS imported
        FROM invoice i
        FULL JOIN ledger l ON l.invoice_id = i.id
        LEFT JOIN imported m ON m.invoice_id = i.id
    )
    SELECT e.*, e.n + CAST(e.imported AS int) AS charges,
           (SELECT count(*) FROM refund f
            WHERE f.invoice_id = e.id AND f.status <> 'FAILED') AS refunds,
           EXISTS (SELECT 1 FROM reconciled r WHERE r.invoice_id = e.id)
           OR EXISTS (SELECT 1 FROM reconciliation_item r WHERE r.invoice_id = e.id)
               AS reconciled
    FROM evidence e
    WHERE e.n + CAST(e.imported AS int) > 1
       OR (e.status = 'PAID' AND e.amount > 0 AND e.n = 0 AND NOT e.imported
           AND (CAST(:since AS timestamptz) IS NULL OR e.paid_at IS NULL OR e.paid_at >= :since))
       OR (e.n + CAST(e.imported AS int) >= 1 AND (e.status IS NULL OR e.status <> 'PAID'))
    ORDER BY 1
    """
)

_PAID_WITHOUT_ATTEMPT = Statement(
    """
    SELECT i.id, i.amount FROM invoice i
    WHERE i.status = 'PAID' AND i.amount > 0
      AND (CAST(:since AS timestamptz) IS NULL OR i.paid_at IS NULL OR i.paid_at >= :since)
      AND (CAST(:until AS timestamptz) IS NULL OR i.paid_at < :until)
      AND NOT EXISTS (
        SELECT 1 FROM payment_attempt a WHERE a.invoice_id = i.id AND a.outcome = 'SUCCESS')
    ORDER BY i.id
    """
)

# Invoices whose extra charges are all given back: the gateway's duplicate audit lists them too.
_REFUNDED = Statement(
    """
    SELECT i.id FROM invoice i
    WHERE i.id = ANY(CAST(:ids AS text)::bigint[]) AND i.status = 'PAID'
      AND EXISTS (SELECT 1 FROM refund f WHERE f.invoice_id = i.id AND f.status <> 'FAILED')
    """
)

_IMPORTED = Statement(
    "SELECT count(DISTINCT invoice_id) FROM payment_attempt "
    "WHERE source = 'IMPORT' AND outcome = 'SUCCESS'"
)

# Successes that could have been applied: a report of an attempt never made, or of another
# amount or currency, is recorded but never applied (MISMATCH) and has its reconciliation event;
# a success held for a person (a reconciliation item of its key, e.g. a report of another
# customer, or of an attempt the invoice only reached later) or whose charge is refunded is not
# one the invoice kept either.
_TWO_KEYS = Statement(
    """
    SELECT a.invoice_id, array_agg(DISTINCT a.idempotency_key) AS keys
    FROM payment_attempt a JOIN invoice i ON i.id = a.invoice_id
    WHERE a.outcome = 'SUCCESS' AND a.attempt_number <= i.attempt_count
      AND a.amount = i.amount AND a.currency = i.currency
      AND NOT EXISTS (SELECT 1 FROM refund f
                      WHERE f.invoice_id = a.invoice_id AND f.charge_key = a.idempotency_key)
      AND NOT EXISTS (SELECT 1 FROM reconciliation_item r
                      WHERE r.invoice_id = a.invoice_id
                        AND r.idempotency_key = a.idempotency_key)
    GROUP BY a.invoice_id HAVING count(DISTINCT a.idempotency_key) > 1
    ORDER BY a.invoice_id
    """
)


def _judge_against_ledger(
    check: Check, rows: Iterable[Mapping[str, Any]], now: datetime
) -> tuple[int, int, int]:
    """Each invoice the gateway charged (or PAID here) against what the database says; return
    how many are in flight (charged, result being recorded), tolerated (reconciled) and
    refunded (a charge it could not keep is being or was given back)."""
    in_flight = tolerated = refunded = 0
    for r in rows:
        kept = r["charges"] - r["refunds"]  # a refund (requested or made) gives one charge back
        if r["refunds"] and r["status"] is not None and kept <= (1 if r["status"] == "PAID" else 0):
            refunded += 1  # a refunded duplicate, or money refunded for a closed invoice
            continue
        if kept > 1:
            how = f"{r['n']} successful charges at the gateway"
            if r["imported"]:
                how = f"imported as paid, and {r['n']} successful charge(s) at the gateway"
            if r["refunds"]:
                how += f", {r['refunds']} refunded"
            check.add("double_charge", "invoice", r["id"], how)
        elif r["status"] is None:
            check.add("charge_unknown_invoice", "invoice", r["id"], "charged, unknown to the DB")
        elif r["charges"] == 0:
            check.add(
                "paid_without_charge", "invoice", r["id"], f"PAID ({r['amount']}), never charged"
            )
        elif r["reconciled"]:
            tolerated += 1
        elif (
            r["status"] == InvoiceStatus.OPEN
            and r["next_attempt_at"] is not None
            and r["next_attempt_at"] > now
        ):
            in_flight += 1
        else:
            paid = "paid by an imported payment" if r["imported"] else "charged"
            check.add(
                "charged_not_paid",
                "invoice",
                r["id"],
                f"{r['status']} but {paid}, with no refund and no reconciliation item",
            )
    return in_flight, tolerated, refunded


_PAID_IN = Statement(
    """
    SELECT count(*) FROM invoice i
    WHERE i.status = 'PAID' AND i.amount > 0 AND i.paid_at < :until
      AND (CAST(:since AS timestamptz) IS NULL OR i.paid_at >= :since)
    """
)


async def _check_paid_against_attempts(
    check: Check, conn: Connection, *, since: datetime | None, until: datetime | None
) -> int:
    """PAID invoices (paid in ``[since, until)``) need a SUCCESS payment attempt; return how
    many PAID invoices that window holds when it is bounded."""
    for r in await fetch(conn, _PAID_WITHOUT_ATTEMPT, {"since": since, "until": until}):
        check.add(
            "paid_without_charge",
            "invoice",
            r["id"],
            f"PAID ({r['amount']}) with no SUCCESS payment attempt",
        )
    if until is None:
        return 0
    return int(await fetchval(conn, _PAID_IN, {"since": since, "until": until}))


async def check_charges(
    conn: Connection,
    ledger: LedgerEvidence | None,
    *,
    now: datetime,
    reconciled: Collection[int] = (),
    since: datetime | None = None,
) -> Check:
    check = Check("charges", "at most one successful charge per invoice; PAID iff charged")
    check.checked = int(await fetchval(conn, _INVOICES))
    for r in await fetch(conn, _TWO_KEYS):
        check.add(
            "double_charge_recorded",
            "invoice",
            r["invoice_id"],
            f"payment attempts record a success under {len(r['keys'])} keys: {sorted(r['keys'])}",
        )
    if ledger is None:
        check.notes.append("no gateway ledger: PAID checked against the payment attempts")
        await _check_paid_against_attempts(check, conn, since=since, until=None)
        return check

    ledger_since = since
    if ledger.started_at is not None:
        ledger_since = ledger.started_at if since is None else max(since, ledger.started_at)
        before = await _check_paid_against_attempts(
            check, conn, since=since, until=ledger.started_at
        )
        if before:
            check.notes.append(
                f"{before} invoices PAID before the gateway ledger began "
                f"({ledger.started_at:%Y-%m-%d %H:%M:%S}): checked against the payment attempts"
            )
    invoice_ids = sorted(ledger.successes)
    params = {
        "invoice_ids": int_array(invoice_ids),
        "counts": int_array(ledger.successes[i] for i in invoice_ids),
        "reconciled": int_array(sorted(reconciled)),
        "since": ledger_since,
    }
    in_flight, tolerated, refunded = _judge_against_ledger(
        check, await fetch(conn, _AGAINST_LEDGER, params), now
    )
    reported = set(check.ids("double_charge"))
    given_back = {
        int(r["id"])
        for r in await fetch(conn, _REFUNDED, {"ids": int_array(ledger.duplicate_success_invoices)})
    }
    for invoice_id in ledger.duplicate_success_invoices:
        if invoice_id not in reported and invoice_id not in given_back:
            check.add("double_charge", "invoice", invoice_id, "in the gateway's duplicate audit")
    check.checked += len(invoice_ids)
    check.notes.append(f"{len(invoice_ids)} invoices charged at the gateway")
    imported = int(await fetchval(conn, _IMPORTED))
    if imported:
        check.notes.append(f"{imported} invoices paid by an imported payment (history)")
    if tolerated:
        check.notes.append(f"{tolerated} charged but not PAID, awaiting reconciliation")
    if refunded:
        check.notes.append(f"{refunded} charged more than they keep, refunded (or being refunded)")
    if in_flight:
        check.notes.append(f"{in_flight} charged, OPEN and leased (result being recorded)")
    return check
