"""The payment gateway boundary: a Protocol, and its HTTP implementation.

The gateway is the one external system. Any answer that does not clearly say "charged" or
"declined" — a timeout, a connection error, a 5xx, a 429, a malformed body — is UNKNOWN: the
caller keeps the attempt count and retries later with the same idempotency key.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Protocol

from billing_core.domain.charge_result import ChargeOutcome, classify, classify_lookup
from billing_core.domain.refund import RefundOutcome, classify_refund
from billing_core.http1 import (
    HeldConnection,
    Http1Pool,
    HttpError,
    HttpTimeout,
    Response,
    SendMissed,
)


class _Answer:
    """What the HTTP status of a gateway's answer says, whatever the call."""

    http_status: int | None

    @property
    def rate_limited(self) -> bool:
        return self.http_status == 429

    @property
    def unauthorized(self) -> bool:
        """The gateway refuses our credentials (401/403): nothing about this call is known,
        and every other call would be refused the same way."""
        return self.http_status in (401, 403)


@dataclass(frozen=True)
class ChargeResult(_Answer):
    outcome: ChargeOutcome
    decline_code: str | None = None
    gateway_reference: str | None = None
    http_status: int | None = None
    error: str | None = None
    retry_after_seconds: float | None = None  # a 429's Retry-After (seconds or HTTP date)
    # A 4xx that says "later", not "never" (Stripe's 409 for a key whose first request is still
    # being processed): retried with the same key like any UNKNOWN, never held as a refusal.
    transient: bool = False
    # The adapter did not send the call: the gateway could not make it as asked (an amount it
    # cannot charge exactly). Nothing was charged, and no retry changes it.
    unsent: bool = False

    @property
    def rejected(self) -> bool:
        """A 4xx that is neither a decline, a rate limit nor a credentials problem (400, 404,
        409 key reused with other parameters, 422): the gateway will refuse this call the same
        way every time, so retrying it is pointless; a person must look."""
        status = self.http_status
        return self.unsent or (
            self.outcome == ChargeOutcome.UNKNOWN
            and status is not None
            and 400 <= status < 500
            and status not in (401, 403, 429)
            and not self.transient
        )


@dataclass(frozen=True)
class RefundResult(_Answer):
    """The gateway's answer to a refund: SUCCEEDED, FAILED (refused for good, with the
    gateway's words in ``error``) or UNKNOWN (ask again later with the same key)."""

    outcome: RefundOutcome
    gateway_reference: str | None = None
    http_status: int | None = None
    error: str | None = None
    retry_after_seconds: float | None = None


@dataclass(frozen=True)
class LookupResult(_Answer):
    """What the gateway knows about one idempotency key.

    ``outcome`` is the stored charge's (SUCCESS or DECLINED) when the gateway has the key,
    ``None`` when it has never seen it (nothing was charged under it), and UNKNOWN when the
    look-up itself failed (timeout, 5xx, 429, the key still being processed, …): still unknown.
    ``amount``, ``currency`` and ``customer_id`` are what the gateway says it charged.
    ``index_lag``: a "never seen" from an index that trails the gateway's writes by up to this
    much (Stripe's search) says nothing of calls made more recently than that."""

    outcome: ChargeOutcome | None
    decline_code: str | None = None
    gateway_reference: str | None = None
    amount: int | None = None
    currency: str | None = None
    customer_id: int | None = None
    http_status: int | None = None
    error: str | None = None
    retry_after_seconds: float | None = None
    index_lag: timedelta = timedelta(0)

    @property
    def never_seen(self) -> bool:
        return self.outcome is None

    def never_seen_since(self, last_call_at: datetime, now: datetime) -> bool:
        """Never seen, and the answer covers a call made at ``last_call_at``."""
        return self.never_seen and now - last_call_at >= self.index_lag


class NotSent(Exception):
    """The call was not made: its send deadline passed before it could go out."""


class GatewayConnection(Protocol):
    """A connection to the gateway, held by one caller until it charges on it."""

    async def charge(
        self,
        customer_id: int,
        amount: int,
        currency: str,
        idempotency_key: str,
        metadata: Mapping[str, int | str],
        *,
        send_by: float | None = None,
    ) -> ChargeResult:
        """``send_by`` (``time.monotonic()``): raise :class:`NotSent`, having sent nothing,
        rather than send later than that."""
        ...

    async def refund(
        self,
        charge_reference: str,
        amount: int,
        currency: str,
        idempotency_key: str,
        *,
        send_by: float | None = None,
    ) -> RefundResult:
        """Give back ``amount`` (of ``currency``, the charge's) of the charge
        ``charge_reference``; the same key always means the same refund (a retry after an
        uncertain answer gets the first one's result)."""
        ...

    async def lookup(
        self,
        idempotency_key: str,
        *,
        reference: str | None = None,
        send_by: float | None = None,
    ) -> LookupResult:
        """What happened to the charge made (or not) under ``idempotency_key``: a call of its
        own at the gateway (it counts against the gateway's rate limit like a charge).
        ``reference``: the gateway's id of a charge made under the key, when an answer or a
        webhook gave one (an adapter whose look-up by key may lag reads that charge instead)."""
        ...


class PaymentGateway(Protocol):
    def connection(self) -> AbstractAsyncContextManager[GatewayConnection]:
        """Get connected now, charge later: a call paced to a send slot must not spend its
        slot waiting for a connection."""
        ...


class OneCallGateway(ABC):
    """A gateway's calls made one at a time, each through a ``connection()`` taken for it: for
    callers that do not pace their calls (the collector holds a connection and calls at a send
    slot)."""

    @abstractmethod
    def connection(self) -> AbstractAsyncContextManager[GatewayConnection]: ...

    async def charge(
        self,
        customer_id: int,
        amount: int,
        currency: str,
        idempotency_key: str,
        metadata: Mapping[str, int | str],
    ) -> ChargeResult:
        async with self.connection() as connection:
            return await connection.charge(customer_id, amount, currency, idempotency_key, metadata)

    async def refund(
        self, charge_reference: str, amount: int, currency: str, idempotency_key: str
    ) -> RefundResult:
        async with self.connection() as connection:
            return await connection.refund(charge_reference, amount, currency, idempotency_key)

    async def lookup(self, idempotency_key: str, *, reference: str | None = None) -> LookupResult:
        async with self.connection() as connection:
            return await connection.lookup(idempotency_key, reference=reference)


class HttpPaymentGateway(OneCallGateway):
    """Charges over HTTP/1.1 keep-alive connections, as many as calls may be in flight.

    The call is made with :mod:`billing_core.http1` rather than httpx: it is the one request
    per charge, and httpx's layers cost about fifteen times the CPU of the request itself.
    """

    def __init__(
        self,
        base_url: str,
        *,
        max_connections: int = 100,
        connect_timeout: float = 2.0,
        read_timeout: float = 10.0,
    ) -> None:
        self._http = Http1Pool(
            base_url,
            max_connections=max_connections,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[_HttpConnection]:
        async with self._http.hold() as held:
            yield _HttpConnection(held)


class _HttpConnection:
    def __init__(self, held: HeldConnection) -> None:
        self._held = held

    async def charge(
        self,
        customer_id: int,
        amount: int,
        currency: str,
        idempotency_key: str,
        metadata: Mapping[str, int | str],
        *,
        send_by: float | None = None,
    ) -> ChargeResult:
        request = {
            "customerId": customer_id,
            "amount": amount,
            "currency": currency,
            "metadata": dict(metadata),
        }
        answer = await self._post("/v1/charges", request, idempotency_key, send_by)
        if isinstance(answer, str):
            return ChargeResult(ChargeOutcome.UNKNOWN, error=answer)
        return _result(answer)

    async def refund(
        self,
        charge_reference: str,
        amount: int,
        currency: str,
        idempotency_key: str,
        *,
        send_by: float | None = None,
    ) -> RefundResult:
        """The simulator knows the charge's currency: the request names the charge only."""
        request = {"chargeId": charge_reference, "amount": amount}
        answer = await self._post("/v1/refunds", request, idempotency_key, send_by)
        if isinstance(answer, str):
            return RefundResult(RefundOutcome.UNKNOWN, error=answer)
        return _refund_result(answer)

    async def lookup(
        self,
        idempotency_key: str,
        *,
        reference: str | None = None,
        send_by: float | None = None,
    ) -> LookupResult:
        """``POST /v1/charges/lookup {"idempotencyKey": …}``: 200 with the stored charge, 404
        when the gateway has never seen the key (at once: the simulator's look-up by key does
        not lag, so ``reference`` adds nothing). (A POST: the key travels in the body, whatever
        characters it holds.)"""
        request = {"idempotencyKey": idempotency_key}
        answer = await self._post("/v1/charges/lookup", request, None, send_by)
        if isinstance(answer, str):
            return LookupResult(ChargeOutcome.UNKNOWN, error=f"lookup {answer}")
        return _lookup_result(answer)

    async def _post(
        self,
        path: str,
        request: Mapping[str, object],
        idempotency_key: str | None,
        send_by: float | None,
    ) -> Response | str:
        """The gateway's answer, or why there is none (a timeout or a transport error: the
        call's outcome is unknown). ``NotSent`` when the send deadline passed first."""
        headers = {} if idempotency_key is None else {"Idempotency-Key": idempotency_key}
        try:
            return await self._held.post_json(
                path,
                json.dumps(request, separators=(",", ":")).encode(),
                headers,
                send_by=send_by,
            )
        except SendMissed:
            raise NotSent from None
        except HttpTimeout as exc:
            return f"timeout: {exc.phase}"
        except HttpError as exc:
            return f"transport: {exc!r}"


def _lookup_result(response: Response) -> LookupResult:
    body = _json_object(response.body)
    outcome, decline_code = classify_lookup(response.status, body)
    if outcome not in (ChargeOutcome.SUCCESS, ChargeOutcome.DECLINED):
        error = None if outcome is None else f"lookup {_error(response.status, body)}"
        return LookupResult(
            outcome,
            http_status=response.status,
            error=error,
            retry_after_seconds=_retry_after(response),
        )
    assert body is not None  # classify_lookup found a charge in it
    amount, currency, reference = _integer(body.get("amount")), body.get("currency"), body.get("id")
    if amount is None or not isinstance(currency, str):
        # A charge whose amount cannot be checked against the invoice is never applied.
        return LookupResult(
            ChargeOutcome.UNKNOWN,
            http_status=response.status,
            error=f"lookup http {response.status}: a charge without amount or currency",
        )
    return LookupResult(
        outcome,
        decline_code=decline_code,
        gateway_reference=reference if isinstance(reference, str) else None,
        amount=amount,
        currency=currency,
        customer_id=_integer(body.get("customerId")),
        http_status=response.status,
    )


def _integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _json_object(raw: bytes) -> Mapping[str, object] | None:
    try:
        parsed = json.loads(raw)
    except ValueError:  # not JSON, or not UTF-8
        return None
    return parsed if isinstance(parsed, dict) else None


def _result(response: Response) -> ChargeResult:
    body = _json_object(response.body)
    outcome, decline_code = classify(response.status, body)
    reference = body.get("id") if body else None
    return ChargeResult(
        outcome,
        decline_code=decline_code,
        gateway_reference=reference if isinstance(reference, str) else None,
        http_status=response.status,
        error=None if outcome != ChargeOutcome.UNKNOWN else _error(response.status, body),
        retry_after_seconds=_retry_after(response),
    )


def _refund_result(response: Response) -> RefundResult:
    body = _json_object(response.body)
    outcome, words = classify_refund(response.status, body)
    reference = body.get("id") if body else None
    status = response.status
    return RefundResult(
        outcome,
        gateway_reference=reference if isinstance(reference, str) else None,
        http_status=status,
        error=words if outcome != RefundOutcome.UNKNOWN or words else _error(status, body),
        retry_after_seconds=_retry_after(response),
    )


def _retry_after(response: Response) -> float | None:
    """A 429's Retry-After in seconds (None for any other answer)."""
    if response.status != 429:
        return None
    return retry_after_seconds(response.headers.get("retry-after"))


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
