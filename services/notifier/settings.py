"""Notifier settings (``BILLING_NOTIFIER_*``, plus the shared ``BILLING_*`` core settings)."""

from __future__ import annotations

from pydantic import Field, SecretStr

from billing_core.settings import CoreSettings


class NotifierSettings(CoreSettings):
    process_name: str = Field(default="billing.notifier")
    notifier_consumer_name: str = Field(
        default="notifier", description="Key of this consumer in processed_event."
    )
    notifier_group_id: str = Field(default="billing-notifier", description="Kafka group id.")
    notifier_health_port: int = Field(default=9104, ge=0, le=65535, description="0 = ephemeral.")
    notifier_max_records: int = Field(default=500, ge=1)
    notifier_shutdown_timeout_seconds: float = Field(
        default=2.0,
        gt=0,
        description="On SIGTERM, how long the poll being processed may still run; after it, "
        "it is rolled back (its records are read again on restart and queue each e-mail once).",
    )
    notifier_smtp_host: str = Field(
        default="127.0.0.1", description="SMTP server the e-mails are handed to."
    )
    notifier_smtp_port: int = Field(
        default=52525,
        ge=1,
        le=65535,
        description="Its port (52525: the development server of scripts/infra.sh).",
    )
    notifier_smtp_starttls: bool = Field(
        default=False, description="Upgrade the connection with STARTTLS (production relays)."
    )
    notifier_smtp_username: str = Field(default="", description="SMTP AUTH user ('' = none).")
    notifier_smtp_password: SecretStr = Field(default=SecretStr(""))
    notifier_smtp_timeout_seconds: float = Field(default=30.0, gt=0)
    notifier_mail_from: str = Field(
        default="Billing <billing@example.invalid>",
        description="From: of every e-mail (its address is also the envelope sender).",
    )
    notifier_send_interval_seconds: float = Field(
        default=0.5, gt=0, description="How often the sender looks for due e-mails."
    )
    notifier_send_batch: int = Field(
        default=200, ge=1, description="E-mails claimed at once (shared out over the connections)."
    )
    notifier_send_connections: int = Field(
        default=4, ge=1, description="SMTP connections a batch is sent over at once."
    )
    notifier_send_lease_seconds: float = Field(
        default=60.0,
        gt=0,
        description="A claimed e-mail not marked sent by then (its sender died) is sent again.",
    )
    notifier_send_retry_seconds: float = Field(
        default=30.0, gt=0, description="Wait after a failed send (doubles per attempt, max 1 h)."
    )
    notifier_send_max_attempts: int = Field(
        default=20, ge=1, description="Attempts before an e-mail is given up (failed_at)."
    )
