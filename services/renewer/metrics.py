"""Prometheus metrics of the renewer (served on /metrics by the health server)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

DUE_BACKLOG = Gauge(
    "billing_renewer_due_backlog_subscriptions",
    "ACTIVE subscriptions whose current period has ended, and TRIALING ones whose trial has "
    "(not yet renewed).",
)
INVOICES_CREATED = Counter(
    "billing_renewer_invoices_created_total", "Renewal invoices created (OPEN or zero-amount PAID)."
)
ZERO_AMOUNT_INVOICES = Counter(
    "billing_renewer_zero_amount_invoices_total",
    "Renewal invoices fully covered by credit, created directly PAID.",
)
CANCELLATIONS = Counter(
    "billing_renewer_cancellations_total", "Subscriptions canceled at period end."
)
ALREADY_INVOICED = Counter(
    "billing_renewer_already_invoiced_periods_total",
    "Periods advanced over because their renewal invoice already existed (replayed batch).",
)
TRIAL_NOTICES = Counter(
    "billing_renewer_trial_notices_total",
    "SubscriptionTrialWillEnd events written (once per trial, a lead time before its end).",
)
RESUMES = Counter(
    "billing_renewer_pause_resumes_total",
    "Paused subscriptions resumed at their resumesAt (SubscriptionResumed written).",
)
PARKED = Gauge(
    "billing_renewer_parked_subscriptions",
    "Due subscriptions this process skips because their data cannot be renewed (see logs).",
)
BATCH_SECONDS = Histogram(
    "billing_renewer_batch_duration_seconds",
    "Duration of one renewal batch (claim to commit).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
BATCH_SIZE = Histogram(
    "billing_renewer_batch_claimed_subscriptions",
    "Subscriptions claimed per batch.",
    buckets=(0, 1, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10000),
)
DOCUMENTS_NUMBERED = Counter(
    "billing_renewer_documents_numbered_total",
    "Invoices and credit notes given their document number (gap-free per series).",
    ["kind"],
)
