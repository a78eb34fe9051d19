"""The renewer's settings (``BILLING_*`` environment variables), built once in main()."""

from __future__ import annotations

from pydantic import Field

from billing_core.settings import CoreSettings


class RenewerSettings(CoreSettings):
    process_name: str = Field(default="billing.renewer")
    renewer_batch_size: int = Field(
        default=1000, ge=1, le=50_000, description="Subscriptions claimed per transaction."
    )
    renewer_concurrency: int = Field(
        default=2,
        ge=1,
        le=16,
        description="Batches in flight per process, each on its own connection: one is planned "
        "in Python while the other is written by PostgreSQL.",
    )
    renewer_poll_interval_seconds: float = Field(
        default=10.0, gt=0, description="Sleep between polls once no batch is full."
    )
    renewer_max_periods_per_row: int = Field(
        default=24,
        ge=1,
        description="Missed periods renewed per subscription per batch; the rest follow in the "
        "next batches (catch-up never skips, it only spreads).",
    )
    renewer_trial_will_end_lead_hours: float = Field(
        default=72.0,
        gt=0,
        le=24 * 365,
        description="How long before a trial ends its SubscriptionTrialWillEnd is published.",
    )
    renewer_shutdown_timeout_seconds: float = Field(
        default=5.0, gt=0, description="How long SIGTERM waits for the current batch to finish."
    )
    renewer_backlog_refresh_seconds: float = Field(
        default=5.0, ge=0, description="How often the due-backlog gauge is recounted."
    )
    renewer_health_port: int = Field(
        default=9101, ge=0, le=65535, description="/healthz, /readyz, /metrics (0: ephemeral)."
    )
