"""The renewer: invoices due subscriptions and advances their periods (renewal step 1 of 2).

It claims due ACTIVE subscriptions with ``FOR UPDATE SKIP LOCKED`` (so replicas share the work),
creates one RENEWAL invoice per ended period (catch-up: none skipped, none doubled), applies the
subscription's credit, cancels the ones flagged ``cancel_at_period_end``, advances the period and
writes the outbox events — one transaction per batch. PAST_DUE subscriptions are not renewed until
a payment returns them to ACTIVE; the renewer then catches up every period they missed. Charging
is step 2, the collector's job.
"""
