"""The payment gateway boundary: a Protocol, and its HTTP implementation over httpx.

The gateway is the one external system. Any answer that does not clearly say "charged" or
"declined" — a timeout, a connection error, a 5xx, a 429, a malformed body — is UNKNOWN: the
caller keeps the attempt count and retries later with the same idempotency key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import httpx

from billing_core.domain.charge_result import ChargeOutcome, classify


@dataclass(frozen=True)
class ChargeResult:
    outcome: ChargeOutcome
    decline_code: str | None = None
    gateway_reference: str | None = None
    http_status: int | None = None
    error: str | None = None


class PaymentGateway(Protocol):
    async def charge(
        self,
        customer_id: int,
        amount: int,
        currency: str,
        idempotency_key: str,
        metadata: Mapping[str, int | str],
    ) -> ChargeResult: ...


class HttpPaymentGateway:
    def __init__(
        self,
        base_url: str,
        *,
        max_connections: int = 100,
        connect_timeout: float = 2.0,
        read_timeout: float = 10.0,
    ) -> None:
        self._client = httpx.AsyncClient(
            base_url=base_url,
            timeout=httpx.Timeout(read_timeout, connect=connect_timeout),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def charge(
        self,
        customer_id: int,
        amount: int,
        currency: str,
        idempotency_key: str,
        metadata: Mapping[str, int | str],
    ) -> ChargeResult:
        try:
            response = await self._client.post(
                "/v1/charges",
                headers={"Idempotency-Key": idempotency_key},
                json={
                    "customerId": customer_id,
                    "amount": amount,
                    "currency": currency,
                    "metadata": dict(metadata),
                },
            )
        except httpx.TimeoutException as exc:
            return ChargeResult(ChargeOutcome.UNKNOWN, error=f"timeout: {type(exc).__name__}")
        except httpx.HTTPError as exc:
            return ChargeResult(ChargeOutcome.UNKNOWN, error=f"transport: {exc!r}")
        body: Mapping[str, object] | None
        try:
            parsed = response.json()
            body = parsed if isinstance(parsed, dict) else None
        except ValueError:
            body = None
        outcome, decline_code = classify(response.status_code, body)
        reference = body.get("id") if body else None
        return ChargeResult(
            outcome,
            decline_code=decline_code,
            gateway_reference=reference if isinstance(reference, str) else None,
            http_status=response.status_code,
            error=None if outcome != ChargeOutcome.UNKNOWN else f"http {response.status_code}",
        )
