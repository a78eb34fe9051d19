"""Settings read from the environment (prefix ``BILLING_``), built once in each process's main().

Defaults point at the local services started by ``scripts/infra.sh``. Each process extends
:class:`CoreSettings` with its own fields (``RenewerSettings``, ...), so one environment
configures the whole system and every field is documented in one place per process.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, ClassVar, Literal, Self

from pydantic import Field, SecretStr, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from billing_core.domain.dunning import DunningPolicy


class RenamedSetting(FutureWarning):
    """An old environment name was used; it is still read for one release."""


class _RenamedEnvSource(PydanticBaseSettingsSource):
    """Reads the old names of renamed settings, below every current name in priority."""

    def __init__(self, settings_cls: type[BaseSettings], renamed: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self._renamed = renamed

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # __call__ does the work: old names are not per field

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for old, field_name in self._renamed.items():
            current = current_name(self.settings_cls, field_name)
            if old in os.environ and current not in os.environ and field_name not in values:
                warnings.warn(
                    f"{old} is a renamed setting; use {current} (the old name is read until the "
                    "next release)",
                    RenamedSetting,
                    stacklevel=2,
                )
                alias = self.settings_cls.model_fields[field_name].validation_alias
                values[alias if isinstance(alias, str) else field_name] = os.environ[old]
        return values


def current_name(settings_cls: type[BaseSettings], field_name: str) -> str:
    """The environment variable a field is read from."""
    alias = settings_cls.model_fields[field_name].validation_alias
    if isinstance(alias, str):
        return alias.upper()
    return f"{settings_cls.model_config.get('env_prefix', '')}{field_name}".upper()


class CoreSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BILLING_", extra="ignore", frozen=True)

    # Old environment name -> field, read (with a RenamedSetting warning) when the current name
    # is not set. Each process class adds its own renames.
    RENAMED: ClassVar[Mapping[str, str]] = {
        "BILLING_RENEWER_HEALTH_HOST": "health_host",
        "BILLING_RELAY_HEALTH_HOST": "health_host",
        "BILLING_NOTIFIER_HEALTH_HOST": "health_host",
    }

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        renamed = {**CoreSettings.RENAMED, **cls.RENAMED}
        return (
            init_settings,
            env_settings,
            _RenamedEnvSource(settings_cls, renamed),
            dotenv_settings,
            file_secret_settings,
        )

    database_url: str = Field(
        default="postgresql+asyncpg://billing@127.0.0.1:55432/billing",
        description="SQLAlchemy URL of the PostgreSQL database (asyncpg driver).",
    )
    db_pool_size: int | None = Field(
        default=None,
        ge=1,
        le=200,
        description="The most connections each process opens; unset, each process sizes its "
        "own pool from its work (API 16, renewer concurrency + 1, collector 12, relay 3, ...).",
    )
    db_statement_timeout_ms: int = Field(default=30_000, ge=0)
    redis_url: str = Field(default="redis://127.0.0.1:56379/0")
    kafka_bootstrap: str = Field(default="127.0.0.1:59092")
    kafka_topic: str = Field(default="billing.events")
    log_level: str = Field(default="INFO", pattern="^(DEBUG|INFO|WARNING|ERROR)$")
    log_json: bool = Field(default=True, description="JSON lines (true) or console output.")
    clock_offset_seconds: int = Field(
        default=0,
        description="Moves every process's clock by this many seconds (demos, tests).",
    )
    process_name: str = Field(default="billing", description="Shown in logs and pg_stat_activity.")
    startup_timeout_seconds: float = Field(
        default=30.0,
        ge=0,
        description="A worker whose database does not answer within this at start exits (3).",
    )
    health_host: str = Field(
        default="127.0.0.1",
        description="Interface of every worker's /healthz /readyz /metrics server (each process "
        "has its own BILLING_<PROCESS>_HEALTH_PORT).",
    )
    dunning_delays_seconds: tuple[int, ...] = Field(
        default=(86_400, 259_200, 432_000),
        description="Retry delays after the 1st, 2nd, 3rd decline (JSON list). After one more "
        "decline the invoice fails and the subscription is canceled.",
        min_length=1,
    )
    dunning_jitter_seconds: int = Field(default=7_200, ge=0, description="Random extra delay.")
    unknown_retry_seconds: int = Field(
        default=900, ge=1, description="Retry delay after an uncertain gateway result."
    )
    profile: Literal["development", "production"] = Field(
        default="production",
        description="development: the local profile (deploy/dev.env), whose dev-… webhook "
        "secrets the API accepts; anywhere else the API refuses to start with one.",
    )
    gateway_key_prefix: str = Field(
        default="",
        pattern=r"^[a-z0-9][a-z0-9-]{0,19}-$|^$",
        description="Put before every gateway idempotency key (e.g. 'prod-': prod-inv-42-try-0) "
        "so that deployments sharing one gateway account never reuse each other's keys; "
        "webhooks must carry it too. Changing it changes every key: only between two runs.",
    )
    unknown_max_retries: int = Field(
        default=48,
        ge=1,
        description="Uncertain answers one attempt's key may get; then the invoice is held for "
        "reconciliation (PaymentReconciliationNeeded) instead of retried.",
    )
    unknown_max_age_seconds: int = Field(
        default=72_000,
        ge=1,
        description="How long after its first use a key may still be retried (keep it below the "
        "gateway's idempotency-key retention, 24 h for most); then held for reconciliation.",
    )

    seller_name: str = Field(
        default="Billing Example Ltd",
        min_length=1,
        description="Who sells: the seller named on invoice documents (PDF) and e-mails.",
    )
    seller_details: tuple[str, ...] = Field(
        default=("1 Example Street", "London EC1A 1AA", "United Kingdom"),
        description="Lines under the seller's name on invoice documents (JSON list): address, "
        "tax id, contact.",
    )

    def dunning_policy(self) -> DunningPolicy:
        return DunningPolicy(
            delays=tuple(timedelta(seconds=s) for s in self.dunning_delays_seconds),
            jitter=timedelta(seconds=self.dunning_jitter_seconds),
            unknown_retry=timedelta(seconds=self.unknown_retry_seconds),
            unknown_max_retries=self.unknown_max_retries,
            unknown_max_age=timedelta(seconds=self.unknown_max_age_seconds),
        )


class GatewaySettings(CoreSettings):
    """Which payment gateway the system uses: the collector charges it, the API checks the
    payment methods set through it."""

    gateway: Literal["simulator", "stripe"] = Field(
        default="simulator",
        description="Which payment gateway the collector charges: the simulator at "
        "BILLING_COLLECTOR_GATEWAY_URL (only then does the API serve POST /webhooks/payments), "
        "or Stripe (BILLING_STRIPE_API_KEY); with Stripe the API checks each payment method "
        "set against the Stripe customer.",
    )
    stripe_api_key: SecretStr = Field(
        default=SecretStr(""),
        description="Stripe secret (or restricted) key; required with BILLING_GATEWAY=stripe.",
    )
    stripe_api_base: str = Field(
        default="https://api.stripe.com",
        description="Stripe's API address (stripe-mock's in tests).",
    )

    @model_validator(mode="after")
    def _stripe_has_a_key(self) -> Self:
        if self.gateway == "stripe" and not self.stripe_api_key.get_secret_value():
            raise ValueError("BILLING_GATEWAY=stripe needs BILLING_STRIPE_API_KEY")
        return self
