"""How the simulated gateway behaves: the run-time configuration and the per-call decision.

:class:`Behaviour` holds every knob that ``POST /v1/admin/config`` may change while the process
runs (latency, declines, timeouts, 5xx, rate limit, clock offset, webhooks). The initial value comes
from the settings; an update is validated as a whole and replaces the previous one atomically.
:func:`decide` draws one call's fate from a seeded ``random.Random`` (reproducible runs).
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Annotated, NamedTuple, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

Rate = Annotated[float, Field(ge=0.0, le=1.0)]
Millis = Annotated[int, Field(ge=0, le=600_000)]
DeclineCode = Annotated[str, Field(pattern=r"^[a-z][a-z_]{0,39}$")]

CONTRACT_DECLINE_CODES: tuple[str, ...] = (
    "insufficient_funds",
    "card_declined",
    "expired_card",
    "do_not_honor",
)
SERVER_ERROR_STATUSES: tuple[int, ...] = (500, 502, 503)


class Behaviour(BaseModel):
    """Everything about the simulator that may change at run time."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    latency_min_ms: Millis = 100
    latency_max_ms: Millis = 300
    decline_rate: Rate = 0.0
    decline_codes: tuple[DeclineCode, ...] = Field(default=CONTRACT_DECLINE_CODES, min_length=1)
    timeout_rate: Rate = 0.0
    timeout_delay_seconds: float = Field(default=30.0, ge=0.0, le=3600.0)
    error_rate: Rate = 0.0
    reject_credentials: bool = False  # every charge answered 401 (revoked API key), none made
    lookup_error_rate: Rate = 0.0  # look-ups by key answered 503 (nothing learned)
    refund_failure_rate: Rate = 0.0  # refunds refused for good (stored: a retry gets the same)
    rate_limit_per_second: int = Field(default=200, ge=0, le=1_000_000)
    clock_offset_seconds: int = 0
    webhook_url: str = ""
    webhook_secret: str = ""
    webhook_delay_min_ms: Millis = 50
    webhook_delay_max_ms: Millis = 500
    webhook_duplicate_rate: Rate = 0.0
    webhook_loss_rate: Rate = 0.0  # results whose webhook is never sent (lost on the way)
    webhook_reorder_rate: Rate = 0.0
    webhook_reorder_delay_ms: Millis = 2_000
    webhook_max_attempts: int = Field(default=5, ge=1, le=20)
    webhook_retry_base_ms: Millis = 500

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.latency_min_ms > self.latency_max_ms:
            raise ValueError("latency_min_ms must not exceed latency_max_ms")
        if self.webhook_delay_min_ms > self.webhook_delay_max_ms:
            raise ValueError("webhook_delay_min_ms must not exceed webhook_delay_max_ms")
        if self.webhook_url:
            if not self.webhook_url.startswith(("http://", "https://")):
                raise ValueError("webhook_url must be an http:// or https:// URL (or empty)")
            if not self.secrets:
                raise ValueError("webhook_secret is required when webhook_url is set")
        return self

    @property
    def secrets(self) -> tuple[str, ...]:
        """Webhook signing secrets (comma-separated: one ``v1=`` signature each, for rotation)."""
        return tuple(s for s in (p.strip() for p in self.webhook_secret.split(",")) if s)

    def now(self) -> datetime:
        """The simulator's "now": the real UTC clock moved by ``clock_offset_seconds``."""
        return datetime.now(UTC) + timedelta(seconds=self.clock_offset_seconds)

    def public(self) -> dict[str, object]:
        """The configuration as the admin API shows it (secrets are not echoed)."""
        data = self.model_dump(mode="json", exclude={"webhook_secret"})
        data["webhook_secret_set"] = bool(self.secrets)
        return data


class Decision(NamedTuple):
    """One call's fate. ``error_status`` set: a 5xx, nothing charged. Otherwise a charge that
    succeeds (``decline_code`` None) or is declined, answered too late when ``late``."""

    error_status: int | None
    decline_code: str | None
    late: bool


def latency_seconds(behaviour: Behaviour, rng: random.Random) -> float:
    low, high = behaviour.latency_min_ms, behaviour.latency_max_ms
    if high == 0:
        return 0.0
    return rng.uniform(low, high) / 1000.0


def decide(behaviour: Behaviour, rng: random.Random, forced_decline: str | None) -> Decision:
    """Draw a call's outcome. ``forced_decline``: the customer's card declines until a date."""
    if behaviour.error_rate and rng.random() < behaviour.error_rate:
        return Decision(rng.choice(SERVER_ERROR_STATUSES), None, False)
    late = bool(behaviour.timeout_rate) and rng.random() < behaviour.timeout_rate
    code = forced_decline
    if code is None and behaviour.decline_rate and rng.random() < behaviour.decline_rate:
        code = rng.choice(behaviour.decline_codes)
    return Decision(None, code, late)


class RefundDecision(NamedTuple):
    """One refund's fate: a 5xx (``error_status``, nothing refunded or stored), or a refund
    made (or refused for good when ``failed``), answered too late when ``late``."""

    error_status: int | None
    failed: bool
    late: bool


def decide_refund(behaviour: Behaviour, rng: random.Random) -> RefundDecision:
    """Draw a refund's outcome with the charges' fault knobs (``error_rate``, ``timeout_rate``)
    and its own ``refund_failure_rate``, from the same seeded draws."""
    if behaviour.error_rate and rng.random() < behaviour.error_rate:
        return RefundDecision(rng.choice(SERVER_ERROR_STATUSES), False, False)
    late = bool(behaviour.timeout_rate) and rng.random() < behaviour.timeout_rate
    failed = bool(behaviour.refund_failure_rate) and rng.random() < behaviour.refund_failure_rate
    return RefundDecision(None, failed, late)
