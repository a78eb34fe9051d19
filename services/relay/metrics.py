"""Prometheus metrics of the relay (``billing_relay_*``), served on /metrics."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

UNPUBLISHED = Gauge(
    "billing_relay_unpublished_events", "Outbox events waiting to be published (not parked)."
)
OLDEST_AGE = Gauge(
    "billing_relay_oldest_unpublished_age_seconds",
    "Age of the oldest unpublished event (now - occurred_at): the relay's lag.",
)
PARKED = Gauge(
    "billing_relay_parked_events", "Events parked (rejected permanently), waiting for an operator."
)
PUBLISHED = Counter(
    "billing_relay_published_events_total",
    "Events acknowledged by Kafka and marked published (rate() gives events/s).",
)
PARKED_TOTAL = Counter("billing_relay_events_parked_total", "Events parked by this process.")
ERRORS = Counter("billing_relay_errors_total", "Relay errors by kind.", ["kind"])
PRODUCER_REBUILDS = Counter(
    "billing_relay_producer_rebuilds_total", "Kafka producers torn down and created again."
)
PRUNED = Counter("billing_relay_pruned_events_total", "Published events deleted after retention.")
OWNED_SHARDS = Gauge("billing_relay_owned_shards", "Shards this replica holds the lease of.")
MEMBERS = Gauge("billing_relay_members", "Relay replicas seen alive (shard leasing).")
BATCH_SECONDS = Histogram(
    "billing_relay_batch_duration_seconds",
    "Claim + send + acknowledgement + mark, per batch.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
