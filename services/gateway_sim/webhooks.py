"""Signed asynchronous webhooks, delivered like a real gateway does: late, sometimes twice,
sometimes out of order, retried with backoff when the receiver does not answer 2xx.

Each delivery is a background task (the charge response never waits for it). A delivery draws
its own delay (uniform ``webhook_delay_min_ms..max_ms``, plus ``webhook_reorder_delay_ms`` with
probability ``webhook_reorder_rate`` so later events overtake it); an event is delivered a second
time, same id and body, with probability ``webhook_duplicate_rate``. Every attempt is signed
afresh: ``Billing-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>``,
one ``v1=`` per configured secret.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import random
from collections.abc import Callable

import httpx
from prometheus_client import CollectorRegistry, Counter

from billing_core.logging import get_logger
from services.gateway_sim.behaviour import Behaviour

log = get_logger(__name__)

SIGNATURE_HEADER = "Billing-Signature"
MAX_BACKOFF_S = 60.0


def sign(body: bytes, secrets: tuple[str, ...], timestamp: int) -> str:
    signed = str(timestamp).encode() + b"." + body
    parts = [f"t={timestamp}"]
    parts += [
        "v1=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest() for secret in secrets
    ]
    return ",".join(parts)


class WebhookSender:
    def __init__(
        self,
        *,
        rng: random.Random,
        max_pending: int,
        registry: CollectorRegistry,
        now_unix: Callable[[], int],
    ) -> None:
        self.rng = rng
        self._max_pending = max_pending
        self._now_unix = now_unix
        self._tasks: set[asyncio.Task[None]] = set()
        self._client: httpx.AsyncClient | None = None
        deliveries = Counter(
            "billing_gateway_sim_webhook_deliveries_total",
            "Webhook delivery attempts and results.",
            ["result"],
            registry=registry,
        )
        self._delivered = deliveries.labels("delivered")
        self._retried = deliveries.labels("retried")
        self._failed = deliveries.labels("failed")
        self._dropped = deliveries.labels("dropped")

    @property
    def pending(self) -> int:
        return len(self._tasks)

    async def start(self) -> None:
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(5.0),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=64),
        )

    async def stop(self) -> None:
        await self.cancel_pending()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def cancel_pending(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def publish(self, event: dict[str, object], behaviour: Behaviour) -> None:
        """Schedule the event's delivery (and maybe a duplicate); returns at once."""
        if not behaviour.webhook_url:
            return
        body = json.dumps(event, separators=(",", ":")).encode()
        copies = 2 if self.rng.random() < behaviour.webhook_duplicate_rate else 1
        for _ in range(copies):
            if len(self._tasks) >= self._max_pending:
                self._dropped.inc()
                log.warning("webhook_dropped", event_id=event["id"], pending=len(self._tasks))
                continue
            delay_ms = self.rng.uniform(
                behaviour.webhook_delay_min_ms, behaviour.webhook_delay_max_ms
            )
            if self.rng.random() < behaviour.webhook_reorder_rate:
                delay_ms += behaviour.webhook_reorder_delay_ms
            task = asyncio.create_task(self._deliver(body, behaviour, delay_ms / 1000.0))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _deliver(self, body: bytes, behaviour: Behaviour, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        client = self._client
        if client is None:
            return
        backoff = behaviour.webhook_retry_base_ms / 1000.0
        for attempt in range(1, behaviour.webhook_max_attempts + 1):
            headers = {
                "Content-Type": "application/json",
                SIGNATURE_HEADER: sign(body, behaviour.secrets, self._now_unix()),
            }
            error: str
            try:
                response = await client.post(behaviour.webhook_url, content=body, headers=headers)
                if 200 <= response.status_code < 300:
                    self._delivered.inc()
                    return
                error = f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                error = repr(exc)
            if attempt == behaviour.webhook_max_attempts:
                self._failed.inc()
                log.warning("webhook_failed", attempts=attempt, error=error)
                return
            self._retried.inc()
            await asyncio.sleep(min(backoff, MAX_BACKOFF_S))
            backoff *= 2
