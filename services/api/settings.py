"""Settings of the API process (``BILLING_*`` environment variables), built once in main()."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from billing_core.settings import GatewaySettings
from services.api.console.probes import parse_processes


class ApiSettings(GatewaySettings):
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
    stripe_webhook_secrets: SecretStr = Field(
        default=SecretStr(""),
        description="Comma-separated signing secrets (whsec_...) of the Stripe webhook endpoint "
        "(POST /webhooks/stripe); any of them may match (rotation). Empty: the route refuses "
        "every event with 401.",
    )
    stripe_webhook_tolerance_seconds: int = Field(
        default=300, ge=1, description="Maximum age (and clock skew) of a Stripe-Signature."
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
        description="Addresses or CIDR ranges of the proxies whose X-Forwarded-For gives the "
        "client's address (comma-separated; empty: none): the address the limit on unknown API "
        "keys counts. Never '*': a client would then choose its own address.",
    )
    access_log: bool = Field(default=False, description="uvicorn's access log.")
    console_enabled: bool = Field(default=True, description="Serve the operator console.")
    console_secret: SecretStr = Field(
        default=SecretStr(""),
        description="Signs console sessions; set the same value on every API replica (empty: "
        "a random one per process, so a session ends when the process does).",
    )
    console_session_seconds: int = Field(
        default=8 * 3600, ge=60, description="How long a console login lasts."
    )
    console_secure_cookies: bool = Field(
        default=True,
        description="Mark the console's cookies Secure (sent over HTTPS only); false only in "
        "development, where the API serves plain HTTP on loopback.",
    )
    console_processes: str = Field(
        default="renewer=http://127.0.0.1:9101,collector=http://127.0.0.1:9102,"
        "relay=http://127.0.0.1:9103,collector2=http://127.0.0.1:9104",
        description="name=URL of each worker's health port, comma-separated: the console shows "
        "whether each answers /readyz and adds up the 429s in their /metrics.",
    )
    collector_rate_limit_per_second: int = Field(
        default=200,
        ge=1,
        le=100_000,
        description="The collectors' gateway limit (the variable they read), the line drawn on "
        "the console's chart of gateway calls per second.",
    )

    @field_validator("api_forwarded_allow_ips")
    @classmethod
    def _forwarders_are_networks(cls, value: str) -> str:
        for entry in filter(None, (part.strip() for part in value.split(","))):
            try:
                ipaddress.ip_network(entry)
            except ValueError as exc:
                raise ValueError(
                    f"{entry!r} is not an address or CIDR range of a trusted proxy"
                ) from exc
        return value

    @field_validator("console_processes")
    @classmethod
    def _processes_parse(cls, value: str) -> str:
        parse_processes(value)
        return value

    def console_process_list(self) -> list[tuple[str, str]]:
        return parse_processes(self.console_processes)

    def webhook_secret_list(self) -> list[bytes]:
        return _secrets(self.webhook_secrets)

    def stripe_webhook_secret_list(self) -> list[bytes]:
        return _secrets(self.stripe_webhook_secrets)

    def unsafe_webhook_secrets(self) -> list[str]:
        """Why the API must not start with these webhook secrets (never the secrets): the
        configured gateway's needs one, and none may be a placeholder, nor a development one
        outside the development profile."""
        found = []
        for name, secrets, needed in (
            ("BILLING_WEBHOOK_SECRETS", self.webhook_secret_list(), self.gateway == "simulator"),
            (
                "BILLING_STRIPE_WEBHOOK_SECRETS",
                self.stripe_webhook_secret_list(),
                self.gateway == "stripe",
            ),
        ):
            if needed and not secrets:
                found.append(f"{name} is empty")
            if any(PLACEHOLDER in s.lower() for s in secrets):
                found.append(f"{name} holds a placeholder (CHANGE-ME)")
            if self.profile != "development" and any(s.lower().startswith(DEV) for s in secrets):
                found.append(
                    f"{name} holds a development secret (dev-...) outside the development "
                    "profile (BILLING_PROFILE=development)"
                )
        return found


PLACEHOLDER = b"change-me"
DEV = b"dev-"


def _secrets(value: SecretStr) -> list[bytes]:
    return [s.strip().encode() for s in value.get_secret_value().split(",") if s.strip()]
