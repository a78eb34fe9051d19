"""Collector settings: ``BILLING_COLLECTOR_*`` plus the shared ``BILLING_*`` ones."""

from __future__ import annotations

from pydantic import Field, SecretStr, model_validator

from billing_core.settings import CoreSettings


class CollectorSettings(CoreSettings):
    process_name: str = "billing.collector"
    collector_gateway_url: str = Field(default="http://127.0.0.1:8100")
    stripe_api_key: SecretStr = Field(
        default=SecretStr(""),
        description="Stripe secret (or restricted) key; required with BILLING_GATEWAY=stripe.",
    )
    stripe_api_base: str = Field(
        default="https://api.stripe.com",
        description="Stripe's API address (stripe-mock's in tests).",
    )
    collector_rate_limit_per_second: int = Field(default=200, ge=1, le=100_000)
    collector_rate_limit_guard_ms: int = Field(
        default=20,
        ge=1,
        le=500,
        description="Send slots are (1 s + guard) / limit apart: the margin for late calls.",
    )
    collector_rate_limit_max_late_ms: int = Field(
        default=10, ge=0, le=499, description="A slot found later than this is dropped."
    )
    collector_rate_limit_horizon_ms: int = Field(
        default=200,
        ge=1,
        le=5000,
        description="How far ahead slots are reserved per round trip (and so how many calls' "
        "pre-call checks are read together).",
    )
    collector_rate_limit_key: str = Field(default="billing:gateway:permits")
    collector_batch_size: int = Field(default=100, ge=1, le=10_000)
    collector_max_in_flight: int = Field(default=128, ge=1, le=10_000)
    collector_expected_latency_seconds: float = Field(
        default=0.3,
        gt=0,
        le=30,
        description="The gateway's usual latency before the first answers measure it: sizes "
        "the window of calls outstanding (limit x latency x 1.25 + 8).",
    )
    collector_group_max: int = Field(
        default=20,
        ge=1,
        le=1000,
        description="Results recorded (and pre-call checks read) in one statement, at most: "
        "a larger group holds the event loop longer, and send slots are missed meanwhile.",
    )
    collector_group_wait_ms: int = Field(
        default=200,
        ge=0,
        le=1000,
        description="How long a result waits for others to be recorded with it (fewer "
        "statements per call at low rates; the lease is far longer).",
    )
    collector_check_lead_ms: int = Field(
        default=30,
        ge=0,
        le=1000,
        description="Pre-call checks wait for others to be read with them until this long "
        "before the earliest of their send slots (the time a read may take).",
    )
    collector_lease_seconds: int = Field(default=120, ge=5)
    collector_poll_interval_seconds: float = Field(default=1.0, gt=0)
    collector_connect_timeout_seconds: float = Field(default=2.0, gt=0)
    collector_read_timeout_seconds: float = Field(default=10.0, gt=0)
    collector_health_port: int = Field(default=9102, ge=0, le=65535)
    collector_shutdown_timeout_seconds: float = Field(default=25.0, gt=0)
    collector_rng_seed: int | None = Field(default=None, description="Seeds dunning jitter.")
    collector_unauthorized_pause_seconds: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="After a 401/403 (credentials refused) every replica pauses this long, then "
        "probes with one call; no invoice is touched meanwhile.",
    )

    @model_validator(mode="after")
    def _stripe_has_a_key(self) -> CollectorSettings:
        if self.gateway == "stripe" and not self.stripe_api_key.get_secret_value():
            raise ValueError("BILLING_GATEWAY=stripe needs BILLING_STRIPE_API_KEY")
        return self

    @model_validator(mode="after")
    def _late_within_guard(self) -> CollectorSettings:
        if self.collector_rate_limit_max_late_ms >= self.collector_rate_limit_guard_ms:
            raise ValueError(
                "BILLING_COLLECTOR_RATE_LIMIT_MAX_LATE_MS must be below "
                "BILLING_COLLECTOR_RATE_LIMIT_GUARD_MS, or a rolling second could exceed the limit"
            )
        return self

    @model_validator(mode="after")
    def _lease_outlives_a_call(self) -> CollectorSettings:
        call = self.collector_connect_timeout_seconds + self.collector_read_timeout_seconds
        if self.collector_lease_seconds <= call * 2:
            raise ValueError(
                "BILLING_COLLECTOR_LEASE_SECONDS must exceed twice the gateway timeouts "
                f"({call:.0f} s), or another replica could retry while a call is in flight"
            )
        return self
