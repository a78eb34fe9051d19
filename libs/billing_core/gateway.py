"""The payment gateway boundary: a Protocol, and its HTTP implementation over httpx.

The gateway is the one external system. Any answer that does not clearly say "charged" or
"declined" — a timeout, a connection error, a 5xx, a 429, a malformed body — is UNKNOWN: the
caller keeps the attempt count and retries later with the same idempotency key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
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
    retry_after_seconds: float | None = None  # a 429's Retry-After (seconds or HTTP date)

    @property
    def rate_limited(self) -> bool:
        return self.http_status == 429

    @property
    def rejected(self) -> bool:
        """A 4xx that is neither a decline, a rate limit nor a credentials problem (400, 404,
        409 key reused with other parameters, 422): the gateway will refuse this call the same
        way every time, so retrying it is pointless; a person must look."""
        status = self.http_status
        return (
            self.outcome == ChargeOutcome.UNKNOWN
            and status is not None
            and 400 <= status < 500
            and status not in (401, 403, 429)
        )

    @property
    def unauthorized(self) -> bool:
        """The gateway refuses our credentials (401/403): nothing about this invoice is known,
        and every other call would be refused the same way."""
        return self.http_status in (401, 403)


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
    """Charges over HTTP/1.1 keep-alive connections, as many as calls may be in flight.

    httpcore's pool re-examines every connection it holds several times per request (its
    bookkeeping grows with the square of the pool size), which made one 128-connection pool
    cost about ten times the CPU of the rest of a call. The connections are therefore split
    into small pools of at most ``SHARD_CONNECTIONS``; each call goes to the least busy one.
    """

    SHARD_CONNECTIONS = 8

    def __init__(
        self,
        base_url: str,
        *,
        max_connections: int = 100,
        connect_timeout: float = 2.0,
        read_timeout: float = 10.0,
    ) -> None:
        shards = -(-max(1, max_connections) // self.SHARD_CONNECTIONS)
        per_shard = -(-max(1, max_connections) // shards)
        self._clients = [
            httpx.AsyncClient(
                base_url=base_url,
                timeout=httpx.Timeout(read_timeout, connect=connect_timeout),
                limits=httpx.Limits(max_connections=per_shard, max_keepalive_connections=per_shard),
            )
            for _ in range(shards)
        ]
        self._busy = [0] * shards

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()

    async def charge(
        self,
        customer_id: int,
        amount: int,
        currency: str,
        idempotency_key: str,
        metadata: Mapping[str, int | str],
    ) -> ChargeResult:
        shard = min(range(len(self._clients)), key=self._busy.__getitem__)
        self._busy[shard] += 1
        try:
            return await self._charge(
                self._clients[shard], customer_id, amount, currency, idempotency_key, metadata
            )
        finally:
            self._busy[shard] -= 1

    @staticmethod
    async def _charge(
        client: httpx.AsyncClient,
        customer_id: int,
        amount: int,
        currency: str,
        idempotency_key: str,
        metadata: Mapping[str, int | str],
    ) -> ChargeResult:
        try:
            response = await client.post(
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
        retry_after = (
            retry_after_seconds(response.headers.get("retry-after"))
            if response.status_code == 429
            else None
        )
        return ChargeResult(
            outcome,
            decline_code=decline_code,
            gateway_reference=reference if isinstance(reference, str) else None,
            http_status=response.status_code,
            error=None if outcome != ChargeOutcome.UNKNOWN else _error(response.status_code, body),
            retry_after_seconds=retry_after,
        )


def retry_after_seconds(header: str | None) -> float | None:
    """A Retry-After header in seconds (delta-seconds or an HTTP date); None when unusable."""
    if not header:
        return None
    value = header.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _error(status: int, body: Mapping[str, object] | None) -> str:
    """``http <status>``; for a refusal no retry changes (a 4xx but 429), with the gateway's own
    words when it gave some (problem details), for the person who will settle it."""
    if not (400 <= status < 500) or status == 429:
        return f"http {status}"
    said = next(
        (body[k] for k in ("detail", "title", "error") if body and isinstance(body.get(k), str)),
        None,
    )
    return f"http {status}" if said is None else f"http {status}: {str(said)[:300]}"
