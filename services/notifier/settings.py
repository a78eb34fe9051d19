"""Notifier settings (``BILLING_NOTIFIER_*``, plus the shared ``BILLING_*`` core settings)."""

from __future__ import annotations

from pydantic import Field

from billing_core.settings import CoreSettings


class NotifierSettings(CoreSettings):
    process_name: str = Field(default="billing.notifier")
    notifier_consumer_name: str = Field(
        default="notifier", description="Key of this consumer in processed_event."
    )
    notifier_group_id: str = Field(default="billing-notifier", description="Kafka group id.")
    notifier_health_port: int = Field(default=9104, ge=0, le=65535, description="0 = ephemeral.")
    notifier_max_records: int = Field(default=500, ge=1)
