"""Signed asynchronous webhooks, delivered like a real gateway does: late, sometimes twice,
sometimes out of order, retried with backoff when the receiver does not answer 2xx.

Publishing never waits (the charge answer goes out at once). A delivery draws its own delay
(uniform ``webhook_delay_min_ms..max_ms``, plus ``webhook_reorder_delay_ms`` with probability
``webhook_reorder_rate`` so later events overtake it); an event is delivered a second time, same
id and body, with probability ``webhook_duplicate_rate``. Every attempt is signed afresh:
``Billing-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>``, one
``v1=`` per configured secret.

Delivery is bounded: a waiting delivery is an entry in a heap ordered by the instant it is due
(no task, no timer of its own); one timer moves the due ones to a FIFO, from which a fixed number
of workers (``webhook_concurrency``) post them, through an HTTP pool of exactly that many
connections, so nothing ever queues inside the HTTP client. A failed attempt goes back to the
heap, due after an exponential backoff with jitter. At most ``max_pending`` deliveries exist at
once (waiting, due or being sent); a new one beyond that is dropped and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import heapq
import hmac
import itertools
import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Counter, Gauge

from billing_core.http1 import Http1Pool, HttpError
from billing_core.logging import get_logger
from services.gateway_sim.behaviour import Behaviour

log = get_logger(__name__)

SIGNATURE_HEADER = "Billing-Signature"
MAX_BACKOFF_S = 60.0
RETRY_JITTER = 0.5  # a retry waits its backoff times a factor drawn uniformly in [1, 1.5)
REQUEST_TIMEOUT_S = 5.0
EARLY_S = 0.001  # a timer may fire this much before a delivery's instant: it is due
REPORT_INTERVAL_S = 10.0  # drops and failures are logged at most this often, with their count


def sign(body: bytes, secrets: tuple[str, ...], timestamp: int) -> str:
    signed = str(timestamp).encode() + b"." + body
    parts = [f"t={timestamp}"]
    parts += [
        "v1=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest() for secret in secrets
    ]
    return ",".join(parts)


def retry_delay_s(base_ms: int, failed_attempts: int, rng: random.Random) -> float:
    """How long to wait before the next attempt after ``failed_attempts`` failed ones.

    ``base_ms`` after the first failure, doubling with each further one, capped at
    :data:`MAX_BACKOFF_S`; then stretched by a random factor in ``[1, 1 + RETRY_JITTER)`` so that
    deliveries that failed together (a receiver outage) do not all come back at the same instant.
    """
    nominal = min(base_ms / 1000.0 * 2.0 ** (failed_attempts - 1), MAX_BACKOFF_S)
    return nominal * (1.0 + RETRY_JITTER * rng.random())


class WebhookClient:
    """Keep-alive connections per receiving origin (the webhook URL may be changed at run
    time), over the same small HTTP/1.1 client the collector uses: the simulator stands for a
    gateway on machines of its own, so its CPU should crowd the system under test as little as
    it can (an httpx request costs about ten times as much)."""

    def __init__(self, concurrency: int) -> None:
        self._concurrency = concurrency
        self._pools: dict[str, Http1Pool] = {}

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> int:
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        pool = self._pools.get(origin)
        if pool is None:
            pool = self._pools[origin] = Http1Pool(
                origin,
                max_connections=self._concurrency,
                connect_timeout=REQUEST_TIMEOUT_S,
                read_timeout=REQUEST_TIMEOUT_S,
            )
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return (await pool.post_json(path, body, headers)).status

    async def aclose(self) -> None:
        for pool in self._pools.values():
            await pool.aclose()
        self._pools.clear()


@dataclass(slots=True)
class Delivery:
    """One copy of an event on its way; ``behaviour`` is the configuration it was published
    under (URL, secrets, attempts, backoff)."""

    body: bytes
    behaviour: Behaviour
    attempts: int = 0


class ThrottledReport:
    """A warning logged at most once per :data:`REPORT_INTERVAL_S`, counting the occurrences
    since the previous line (the metrics count every one)."""

    def __init__(self, event: str) -> None:
        self._event = event
        self._unreported = 0
        self._last_at = -REPORT_INTERVAL_S

    def occurred(self, now: float, **fields: object) -> None:
        self._unreported += 1
        if now - self._last_at >= REPORT_INTERVAL_S:
            log.warning(self._event, count=self._unreported, **fields)
            self._unreported = 0
            self._last_at = now


class WebhookSender:
    def __init__(
        self,
        *,
        concurrency: int,
        max_pending: int,
        registry: CollectorRegistry,
        now_unix: Callable[[], int],
    ) -> None:
        self.rng = random.Random()  # delays, duplicates, reordering: drawn at publish
        self._retry_rng = random.Random()  # backoff jitter: drawn when an attempt fails
        self._concurrency = concurrency
        self._max_pending = max_pending
        self._now_unix = now_unix
        self._client: WebhookClient | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._waiting: list[tuple[float, int, Delivery]] = []  # heap: (due, order, delivery)
        self._order = itertools.count()
        self._timer: asyncio.Handle | None = None  # uvloop answers a Handle for a past instant
        self._timer_at = 0.0
        self._due: asyncio.Queue[Delivery] = asyncio.Queue()
        self._sending = 0
        self._drops = ThrottledReport("webhooks_dropped")
        self._failures = ThrottledReport("webhooks_failed")
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
        Gauge(
            "billing_gateway_sim_webhook_backlog_deliveries",
            "Webhook deliveries not finished: waiting for their instant, due, or being sent.",
            registry=registry,
        ).set_function(lambda: self.pending)

    def seed(self, seed: str) -> None:
        self.rng.seed(seed)
        self._retry_rng.seed(f"{seed}:retries")

    @property
    def pending(self) -> int:
        """Deliveries waiting for their instant, due, or being sent (what ``max_pending``
        bounds)."""
        return len(self._waiting) + self._due.qsize() + self._sending

    async def start(self) -> None:
        self._client = WebhookClient(self._concurrency)
        self._start_workers()

    async def stop(self) -> None:
        client, self._client = self._client, None
        await self.cancel_pending()
        if client is not None:
            await client.aclose()

    async def cancel_pending(self) -> None:
        """Forget every delivery, including the attempts being sent (they are cancelled)."""
        workers, self._workers = self._workers, []
        for worker in workers:
            worker.cancel()
        for worker in workers:
            with contextlib.suppress(asyncio.CancelledError):
                await worker
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._waiting.clear()
        self._due = asyncio.Queue()
        self._sending = 0
        if self._client is not None:
            self._start_workers()

    def publish(self, event: dict[str, object], behaviour: Behaviour) -> None:
        """Schedule the event's delivery (and maybe a duplicate); returns at once."""
        if not behaviour.webhook_url:
            return
        body = json.dumps(event, separators=(",", ":")).encode()
        copies = 2 if self.rng.random() < behaviour.webhook_duplicate_rate else 1
        for _ in range(copies):
            if self.pending >= self._max_pending:
                self._dropped.inc()
                self._drops.occurred(
                    asyncio.get_running_loop().time(),
                    event_id=event["id"],
                    pending=self.pending,
                    max_pending=self._max_pending,
                )
                continue
            delay_ms = self.rng.uniform(
                behaviour.webhook_delay_min_ms, behaviour.webhook_delay_max_ms
            )
            if self.rng.random() < behaviour.webhook_reorder_rate:
                delay_ms += behaviour.webhook_reorder_delay_ms
            self._schedule(Delivery(body, behaviour), delay_ms / 1000.0)

    def _schedule(self, delivery: Delivery, delay_s: float) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time() + delay_s
        heapq.heappush(self._waiting, (due, next(self._order), delivery))
        if self._timer is None or due < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._arm(loop, due)

    def _arm(self, loop: asyncio.AbstractEventLoop, due: float) -> None:
        self._timer = loop.call_at(due, self._release_due)
        self._timer_at = due

    def _release_due(self) -> None:
        """Move the deliveries whose instant has come to the workers' FIFO; re-arm the timer."""
        self._timer = None
        loop = asyncio.get_running_loop()
        horizon = loop.time() + EARLY_S
        waiting = self._waiting
        while waiting and waiting[0][0] <= horizon:
            self._due.put_nowait(heapq.heappop(waiting)[2])
        if waiting:
            self._arm(loop, waiting[0][0])

    def _start_workers(self) -> None:
        self._workers = [
            asyncio.create_task(self._work(), name=f"webhook-worker-{n}")
            for n in range(self._concurrency)
        ]

    async def _work(self) -> None:
        while True:
            delivery = await self._due.get()
            client = self._client
            if client is None:
                return
            self._sending += 1
            try:
                await self._attempt(client, delivery)
            except Exception:
                self._failed.inc()
                log.exception("webhook_delivery_error")
            finally:
                self._sending -= 1

    async def _attempt(self, client: WebhookClient, delivery: Delivery) -> None:
        behaviour = delivery.behaviour
        delivery.attempts += 1
        headers = {SIGNATURE_HEADER: sign(delivery.body, behaviour.secrets, self._now_unix())}
        error: str
        try:
            status = await client.post(behaviour.webhook_url, delivery.body, headers)
        except (HttpError, ValueError) as exc:
            error = repr(exc)
        else:
            if 200 <= status < 300:
                self._delivered.inc()
                return
            error = f"HTTP {status}"
        if delivery.attempts >= behaviour.webhook_max_attempts:
            self._failed.inc()
            self._failures.occurred(
                asyncio.get_running_loop().time(), attempts=delivery.attempts, error=error
            )
            return
        self._retried.inc()
        delay_s = retry_delay_s(behaviour.webhook_retry_base_ms, delivery.attempts, self._retry_rng)
        self._schedule(delivery, delay_s)
