"""Settings of the API process (``BILLING_*`` environment variables), built once in main()."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from billing_core.settings import CoreSettings


class ApiSettings(CoreSettings):
    model_config = SettingsConfigDict(env_prefix="BILLING_", extra="ignore", frozen=True)

    process_name: str = Field(default="billing.api")
    RENAMED: ClassVar[Mapping[str, str]] = {
        "BILLING_HOST": "api_host",
        "BILLING_PORT": "api_port",
    }
    api_host: str = Field(default="127.0.0.1", description="Interface uvicorn binds to.")
    api_port: int = Field(default=8000, ge=0, le=65535, description="0 picks a free port.")
    webhook_secrets: SecretStr = Field(
        default=SecretStr(""),
        description="Comma-separated HMAC secrets for gateway webhooks; any of them may match "
        "(rotation: add the new secret, switch the gateway, then drop the old one).",
    )
    webhook_tolerance_seconds: int = Field(
        default=300, ge=1, description="Maximum age (and clock skew) of a webhook signature."
    )
    webhook_group_wait_ms: float = Field(
        default=50.0,
        ge=0,
        le=1000,
        description="How long a webhook may wait for others to be recorded with it in one "
        "transaction (0: only those that arrive while a group is being recorded).",
    )
    webhook_group_gap_ms: float = Field(
        default=10.0,
        gt=0,
        le=1000,
        description="A webhook group closes early once no webhook has arrived for this long.",
    )
    idempotency_retention_seconds: int = Field(
        default=24 * 3600, ge=1, description="How long a stored idempotent response is replayed."
    )
    idempotency_purge_interval_seconds: float = Field(
        default=300.0,
        ge=0,
        description="Period of the in-process task deleting expired idempotency keys (0: off).",
    )
    max_body_bytes: int = Field(
        default=64 * 1024, ge=1024, description="Larger request bodies are refused with 413."
    )
    auth_cache_seconds: float = Field(
        default=10.0,
        ge=0,
        description="How long a verified API key is trusted without a database look-up "
        "(a revoked key stops working after at most this long).",
    )
    plan_cache_seconds: float = Field(
        default=10.0,
        ge=0,
        description="How long the plan catalogue is kept in the process (a plan added or "
        "retired by a migration is seen after at most this long).",
    )
    auth_negative_cache_seconds: float = Field(
        default=10.0,
        ge=0,
        description="How long an unknown API key is remembered as unknown (no database look-up).",
    )
    auth_failures_per_address: int = Field(
        default=20,
        ge=1,
        description="Unknown API keys one source address may try per "
        "auth_failure_window_seconds; past that its key look-ups get 429 (no database work).",
    )
    auth_failure_window_seconds: float = Field(default=60.0, gt=0)
    api_rate_limit_per_minute: int = Field(
        default=6000,
        ge=1,
        description="Requests per minute of an API client whose key sets no limit of its own.",
    )
    api_rate_limit_window_seconds: int = Field(
        default=60,
        ge=1,
        le=3600,
        description="The fixed window the rate limit counts in (the limit scales with it).",
    )
    api_rate_limit_key_prefix: str = Field(
        default="billing:api:rate:",
        description="Redis keys of the rate limit start with this (several deployments may "
        "share one Redis).",
    )
    api_internal_port: int = Field(
        default=9100,
        ge=0,
        le=65535,
        description="/metrics, /healthz, /readyz (and the docs unless api_public_docs) on "
        "health_host, apart from the public port (0: ephemeral).",
    )
    api_public_docs: bool = Field(
        default=False,
        description="Also serve /docs and /openapi.json on the public port (development).",
    )
    api_forwarded_allow_ips: str = Field(
        default="127.0.0.1",
        description="Proxies whose X-Forwarded-For gives the client's address (comma-separated, "
        "'*' for any): the address the limit on unknown API keys counts.",
    )
    access_log: bool = Field(default=False, description="uvicorn's access log.")

    def webhook_secret_list(self) -> list[bytes]:
        raw = self.webhook_secrets.get_secret_value()
        return [s.strip().encode() for s in raw.split(",") if s.strip()]
