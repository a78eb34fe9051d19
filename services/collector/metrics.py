"""Prometheus metrics of the collector."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

CALLS = Counter("billing_collector_gateway_calls_total", "Gateway calls by outcome", ["outcome"])
CALL_SECONDS = Histogram(
    "billing_collector_gateway_call_duration_seconds",
    "Gateway call latency",
    buckets=(0.05, 0.1, 0.2, 0.3, 0.5, 1, 2, 5, 10, 30),
)
LIMITER_WAIT = Histogram(
    "billing_collector_limiter_wait_seconds",
    "Time waited for a rate-limit permit",
    buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 30),
)
LIMITER_CLOSED = Gauge(
    "billing_collector_limiter_closed", "1 while Redis is unreachable (collection paused)"
)
LATE_PERMITS = Counter(
    "billing_collector_limiter_late_permits_total",
    "Send slots dropped because the process woke too late to use them",
)
SLOTS_GRANTED = Counter(
    "billing_collector_limiter_slots_granted_total",
    "Send slots of the shared limit this replica reserved (used or not)",
)
SEND_LATENESS = Histogram(
    "billing_collector_send_lateness_seconds",
    "How long after its send slot a call went out (later than the send bound: dropped, counted "
    "in billing_collector_limiter_late_permits_total)",
    buckets=(0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.05),
)
CHECK_AFTER_SLOT = Counter(
    "billing_collector_check_after_slot_total",
    "Pre-call checks still being read when their send slot came (the call leaves late)",
)
RECORDED = Counter("billing_collector_results_total", "Recorded results", ["result"])
ABANDONED = Counter(
    "billing_collector_abandoned_total", "Leased invoices dropped before the call (lease too old)"
)
SKIPPED = Counter(
    "billing_collector_calls_skipped_total",
    "Leased invoices not charged because they changed since the claim (canceled, settled by a "
    "webhook, or taken by another replica)",
)
UNAUTHORIZED = Counter(
    "billing_collector_gateway_unauthorized_total",
    "401/403 answers: the gateway refuses the credentials; every replica pauses, no invoice is "
    "touched",
)
IN_FLIGHT = Gauge("billing_collector_in_flight_invoices", "Invoices being charged now")
BACKLOG = Gauge("billing_collector_due_backlog_invoices", "OPEN invoices whose next attempt is due")
OLDEST_DUE = Gauge("billing_collector_oldest_due_age_seconds", "Age of the oldest due OPEN invoice")
WINDOW = Gauge(
    "billing_collector_call_window_calls",
    "Calls this replica may have outstanding at the gateway now (shrinks on latency spikes, 429s)",
)
RATE_LIMITED = Counter(
    "billing_collector_rate_limited_total",
    "429 answers from the gateway (each pauses every replica through the shared limiter)",
)
LATE_ANSWERS = Counter(
    "billing_collector_late_answers_total",
    "Answers slower than twice the usual latency; each one also uses up a send slot",
)
WINDOW_FULL_SLOTS = Counter(
    "billing_collector_window_full_slots_total",
    "Send slots left unused because the window of outstanding calls was full (slow gateway)",
)
RECORD_GROUP = Histogram(
    "billing_collector_record_group_results",
    "Results recorded together in one transaction",
    buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500),
)
CHECK_GROUP = Histogram(
    "billing_collector_check_group_invoices",
    "Pre-call checks read together in one statement",
    buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500),
)
REFUNDS = Counter(
    "billing_collector_refunds_total",
    "Refund calls by outcome (SUCCEEDED, FAILED: refused for good, UNKNOWN: asked again)",
    ["outcome"],
)
LOOKUPS = Counter(
    "billing_collector_lookups_total",
    "Look-ups by key after an uncertain answer (or for an invoice canceled during its call), "
    "by what they said: succeeded, declined, not_found (never charged under the key), unknown "
    "(still uncertain)",
    ["result"],
)
