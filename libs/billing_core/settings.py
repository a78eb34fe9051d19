"""Settings read from the environment (prefix ``BILLING_``), built once in each process's main().

Defaults point at the local services started by ``scripts/infra.sh``. Each process extends
:class:`CoreSettings` with its own fields (``RenewerSettings``, ...), so one environment
configures the whole system and every field is documented in one place per process.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from billing_core.domain.dunning import DunningPolicy


class CoreSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BILLING_", extra="ignore", frozen=True)

    database_url: str = Field(
        default="postgresql+asyncpg://billing@127.0.0.1:55432/billing",
        description="SQLAlchemy URL of the PostgreSQL database (asyncpg driver).",
    )
    db_pool_size: int = Field(default=10, ge=1, le=200)
    db_max_overflow: int = Field(default=5, ge=0, le=200)
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
        default="127.0.0.1", description="Interface of the workers' /healthz /readyz /metrics."
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

    def dunning_policy(self) -> DunningPolicy:
        return DunningPolicy(
            delays=tuple(timedelta(seconds=s) for s in self.dunning_delays_seconds),
            jitter=timedelta(seconds=self.dunning_jitter_seconds),
            unknown_retry=timedelta(seconds=self.unknown_retry_seconds),
        )
