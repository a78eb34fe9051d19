"""Settings of the gateway simulator.

The simulator's own fields are read from ``BILLING_GATEWAY_SIM_<FIELD>`` (e.g.
``BILLING_GATEWAY_SIM_PORT``); the shared ones keep their system-wide names (``BILLING_LOG_LEVEL``,
``BILLING_CLOCK_OFFSET_SECONDS``), so the simulator's clock agrees with the other processes.
Every behaviour field is validated by :class:`~services.gateway_sim.behaviour.Behaviour` too, so a
bad value stops the process at start with the field's name in the message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from billing_core.settings import CoreSettings
from services.gateway_sim.behaviour import Behaviour, DeclineCode, Millis, Rate

PREFIX = "BILLING_GATEWAY_SIM_"


def _sim(default: Any, name: str, description: str, **constraints: Any) -> Any:
    return Field(
        default=default,
        validation_alias=f"{PREFIX}{name.upper()}",
        description=description,
        **constraints,
    )


class GatewaySimSettings(CoreSettings):
    RENAMED: ClassVar[Mapping[str, str]] = {
        f"{PREFIX}TIMEOUT_DELAY_S": "timeout_delay_seconds",
        f"{PREFIX}LATE_ANSWER_GRACE_S": "late_answer_grace_seconds",
    }
    process_name: str = "billing.gateway_sim"
    model_config = SettingsConfigDict(
        env_prefix="BILLING_",
        extra="ignore",
        frozen=True,
        # Only the BILLING_GATEWAY_SIM_* names: by field name, the environment's BILLING_HOST or
        # BILLING_PORT (another process's) would be read too.
        validate_by_name=False,
        validate_by_alias=True,
    )

    host: str = _sim("127.0.0.1", "host", "Interface to listen on.")
    port: int = _sim(8100, "port", "TCP port.", ge=1, le=65535)
    seed: int = _sim(0, "seed", "Seeds every random draw (outcomes, latencies, ids, webhooks).")
    latency_min_ms: Millis = _sim(100, "latency_min_ms", "Charge latency, uniform lower bound.")
    latency_max_ms: Millis = _sim(300, "latency_max_ms", "Charge latency, uniform upper bound.")
    decline_rate: Rate = _sim(0.0, "decline_rate", "Share of charges declined (402).")
    decline_codes: tuple[DeclineCode, ...] = _sim(
        ("insufficient_funds", "card_declined", "expired_card", "do_not_honor"),
        "decline_codes",
        "Decline codes drawn uniformly (JSON list in the environment).",
        min_length=1,
    )
    timeout_rate: Rate = _sim(
        0.0, "timeout_rate", "Share of charges made, stored, then answered too late."
    )
    timeout_delay_seconds: float = _sim(
        30.0,
        "timeout_delay_seconds",
        "How late a 'timeout' answers (beyond the client's timeout).",
        ge=0.0,
        le=3600.0,
    )
    error_rate: Rate = _sim(0.0, "error_rate", "Share of calls answered 5xx (nothing charged).")
    reject_credentials: bool = _sim(
        False, "reject_credentials", "Answer every charge 401 (a revoked API key; none made)."
    )
    refund_failure_rate: Rate = _sim(
        0.0, "refund_failure_rate", "Share of refunds refused for good (402, stored, replayed)."
    )
    lookup_error_rate: Rate = _sim(
        0.0, "lookup_error_rate", "Share of look-ups by key answered 503 (nothing learned)."
    )
    rate_limit_per_second: int = _sim(
        200,
        "rate_limit_per_second",
        "Calls admitted per rolling second; 0 = unlimited.",
        ge=0,
        le=1_000_000,
    )
    webhook_url: str = _sim("", "webhook_url", "Where webhooks go; empty = no webhooks.")
    webhook_secret: str = _sim(
        "", "webhook_secret", "HMAC secret(s), comma-separated (one v1= signature each)."
    )
    webhook_delay_min_ms: Millis = _sim(50, "webhook_delay_min_ms", "Webhook delay lower bound.")
    webhook_delay_max_ms: Millis = _sim(500, "webhook_delay_max_ms", "Webhook delay upper bound.")
    webhook_duplicate_rate: Rate = _sim(
        0.0, "webhook_duplicate_rate", "Share of events delivered twice (same event id)."
    )
    webhook_loss_rate: Rate = _sim(
        0.0, "webhook_loss_rate", "Share of results whose webhook is never sent (lost)."
    )
    webhook_reorder_rate: Rate = _sim(
        0.0, "webhook_reorder_rate", "Share of deliveries held back so later events overtake."
    )
    webhook_reorder_delay_ms: Millis = _sim(
        2_000, "webhook_reorder_delay_ms", "Extra delay of a held-back delivery."
    )
    webhook_max_attempts: int = _sim(
        5,
        "webhook_max_attempts",
        "Delivery attempts per webhook (retries on non-2xx).",
        ge=1,
        le=20,
    )
    webhook_retry_base_ms: Millis = _sim(
        500,
        "webhook_retry_base_ms",
        "First retry backoff; doubles each attempt (capped 60 s), then up to 50 % jitter.",
    )
    webhook_concurrency: int = _sim(
        32,
        "webhook_concurrency",
        "Webhook deliveries sent at once (and HTTP connections to the receiver).",
        ge=1,
        le=1024,
    )
    webhook_max_pending: int = _sim(
        100_000,
        "webhook_max_pending",
        "Deliveries not finished at once (waiting, due or being sent); new ones beyond are"
        " dropped (counted).",
        ge=1,
    )
    late_answer_grace_seconds: float = _sim(
        1.0,
        "late_answer_grace_seconds",
        "On shutdown, how long late answers may still finish.",
        ge=0.0,
    )

    @model_validator(mode="after")
    def _behaviour_is_valid(self) -> Self:
        self.behaviour()
        return self

    def behaviour(self) -> Behaviour:
        """The initial run-time behaviour (what ``POST /v1/admin/reset`` returns to)."""
        fields = set(Behaviour.model_fields) - {"clock_offset_seconds"}
        return Behaviour.model_validate(
            {
                **{name: getattr(self, name) for name in fields},
                "clock_offset_seconds": self.clock_offset_seconds,
            }
        )
