"""Relay settings (``BILLING_RELAY_*``, plus the shared ``BILLING_*`` core settings)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field

from billing_core.settings import CoreSettings


class RelaySettings(CoreSettings):
    RENAMED: ClassVar[Mapping[str, str]] = {
        f"BILLING_RELAY_{name.upper()}_S": f"relay_{name}_seconds"
        for name in (
            "poll_interval",
            "rebalance_interval",
            "publish_timeout",
            "prune_interval",
            "stats_interval",
            "shutdown_timeout",
        )
    }
    process_name: str = Field(default="billing.relay")
    relay_health_port: int = Field(default=9103, ge=0, le=65535, description="0 = ephemeral.")
    relay_topic_partitions: int = Field(
        default=12, ge=1, description="Partition count used when the relay creates the topic."
    )
    relay_topic_replication: int = Field(default=1, ge=1)
    relay_shards: int = Field(
        default=32,
        ge=1,
        le=4096,
        description="Fixed number of shards (aggregate_id % shards). Every replica of one "
        "deployment must use the same value.",
    )
    relay_batch_size: int = Field(default=2000, ge=1, le=50_000)
    relay_poll_interval_seconds: float = Field(default=0.05, gt=0)
    relay_rebalance_interval_seconds: float = Field(default=2.0, gt=0)
    relay_publish_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="How long one batch may wait for its acknowledgements before the producer "
        "is torn down and rebuilt (broker unreachable or stuck).",
    )
    relay_source: str = Field(default="urn:billing:outbox", description="CloudEvents source.")
    relay_linger_ms: int = Field(default=5, ge=0)
    relay_max_batch_bytes: int = Field(default=262_144, ge=1024, description="Producer batch.")
    relay_max_message_bytes: int = Field(
        default=1_000_000,
        ge=1024,
        description="Largest record the relay sends; bigger events are parked. Keep it at or "
        "below the topic's max.message.bytes.",
    )
    relay_retention_hours: float = Field(
        default=168.0, ge=0, description="Published rows older than this are pruned."
    )
    relay_prune_interval_seconds: float = Field(default=60.0, gt=0)
    relay_prune_batch: int = Field(default=1000, ge=1)
    relay_prune_max_batches: int = Field(
        default=20, ge=1, description="Batches deleted per prune run (keeps each run short)."
    )
    relay_stats_interval_seconds: float = Field(default=5.0, gt=0)
    relay_shutdown_timeout_seconds: float = Field(default=20.0, gt=0)
    relay_crash_after_send: int = Field(
        default=0,
        ge=0,
        description="Tests only: exit abruptly after the Nth acknowledged batch, before marking "
        "it published (0 = never).",
    )
