"""Settings read from the environment (prefix ``BILLING_``), built once in each process's main().

Defaults point at the local services started by ``scripts/infra.sh``. Each process extends
:class:`CoreSettings` with its own fields (``RenewerSettings``, ...), so one environment
configures the whole system and every field is documented in one place per process.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


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
