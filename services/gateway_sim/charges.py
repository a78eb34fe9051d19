"""Charging: the idempotency rules around one call, independent of HTTP.

* A stored key answers its stored result (success or decline), flagged as a replay; with a
  different body it is a conflict.
* A key already in flight makes later requests wait for the first one's result (one charge).
* Otherwise: wait the drawn latency, draw the outcome, and either answer 5xx (nothing stored, the
  key stays free) or store the result, publish its webhook, and answer -- at once, or after
  ``timeout_delay_seconds`` for a "timeout" (charged and stored, answered too late).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import NamedTuple

from prometheus_client import CollectorRegistry, Counter

from services.gateway_sim.behaviour import Behaviour, decide, decide_refund, latency_seconds
from services.gateway_sim.ledger import ChargeInput, Ledger, RefundInput
from services.gateway_sim.limiter import RollingSecondLimiter
from services.gateway_sim.stall import Stall
from services.gateway_sim.webhooks import WebhookSender

OUTCOMES = (
    "succeeded",
    "declined",
    "timeout",
    "replayed",
    "conflict",
    "server_error",
    "rate_limited",
    "invalid",
    "unauthorized",
)
LOOKUP_OUTCOMES = ("found", "not_found", "in_progress", "server_error")


REFUND_OUTCOMES = (
    "succeeded",
    "failed",
    "timeout",
    "replayed",
    "conflict",
    "server_error",
    "not_found",
    "not_refundable",
)


class Reply(NamedTuple):
    status: int
    body: dict[str, object]
    replayed: bool
    late_s: float


class CustomerDecline(NamedTuple):
    until: datetime
    code: str


@dataclass
class KeyedCalls:
    """The idempotency rules of one kind of call (charges, refunds), by key: what is stored under
    the key answers (``find``, ``fingerprint`` and ``answer`` read it), another body under it is
    a conflict (``counted`` is told "conflict" or "replayed"), and a key in flight makes later
    requests wait for the first one's end."""

    find: Callable[[str], int | None]
    fingerprint: Callable[[int], int]
    answer: Callable[[int], Reply]
    counted: Callable[[str], None]
    in_flight: dict[str, asyncio.Future[None]] = field(default_factory=dict)

    async def once(self, key: str, fingerprint: int, call: Callable[[], Awaitable[Reply]]) -> Reply:
        """The stored answer under ``key``, else ``call()``'s, made while no other call holds
        the key (one that stored nothing, a 5xx, leaves it free for the next)."""
        while (index := self.find(key)) is None:
            pending = self.in_flight.get(key)
            if pending is None:
                return await self._alone(key, call)
            await asyncio.shield(pending)
        if self.fingerprint(index) != fingerprint:
            self.counted("conflict")
            return Reply(409, _conflict(key), False, 0.0)
        self.counted("replayed")
        return self.answer(index)

    async def _alone(self, key: str, call: Callable[[], Awaitable[Reply]]) -> Reply:
        done = asyncio.get_running_loop().create_future()
        self.in_flight[key] = done
        try:
            return await call()
        finally:
            del self.in_flight[key]
            done.set_result(None)


def _children(counter: Counter, values: Iterable[str]) -> dict[str, Counter]:
    """``counter``'s child per label value, made now so each is exported at zero before it is
    counted."""
    return {value: counter.labels(value) for value in values}


class Gateway:
    def __init__(
        self,
        *,
        behaviour: Behaviour,
        seed: int,
        webhook_concurrency: int,
        max_pending_webhooks: int,
    ) -> None:
        self.registry = CollectorRegistry()
        self._calls = _children(
            Counter(
                "billing_gateway_sim_calls_total",
                "Charge calls by outcome.",
                ["outcome"],
                registry=self.registry,
            ),
            OUTCOMES,
        )
        self._lookups = _children(
            Counter(
                "billing_gateway_sim_lookups_total",
                "Look-ups by idempotency key, by answer.",
                ["result"],
                registry=self.registry,
            ),
            LOOKUP_OUTCOMES,
        )
        self._refund_calls = _children(
            Counter(
                "billing_gateway_sim_refunds_total",
                "Refund calls by outcome.",
                ["outcome"],
                registry=self.registry,
            ),
            REFUND_OUTCOMES,
        )
        self._rate_limited = Counter(
            "billing_gateway_sim_rate_limited_total",
            "Charge calls refused with 429 (over the rolling-second limit).",
            registry=self.registry,
        )
        self.ledger = Ledger()
        self.limiter = RollingSecondLimiter(behaviour.rate_limit_per_second)
        self.webhooks = WebhookSender(
            concurrency=webhook_concurrency,
            max_pending=max_pending_webhooks,
            registry=self.registry,
            now_unix=lambda: int(self.behaviour.now().timestamp()),
        )
        self._seed = seed
        self._charges = KeyedCalls(
            find=self.ledger.find,
            fingerprint=self.ledger.fingerprint,
            answer=lambda index: self._answer(index, replayed=True),
            counted=self._charge_counted,
        )
        self._refunds = KeyedCalls(
            find=self.ledger.find_refund,
            fingerprint=lambda index: self.ledger.stored_refund(index).fingerprint,
            answer=lambda index: self._refund_answer(index, replayed=True),
            counted=self._refund_counted,
        )
        self.stall = Stall()
        self.behaviour = behaviour
        self._initial = behaviour
        self.reset()

    def reset(self) -> None:
        """Back to the state at start: empty ledger, initial behaviour, reseeded draws."""
        self.configure(self._initial)
        self.stall.reset()
        self.ledger.clear()
        self.ledger_started_at = self.behaviour.now()
        self.limiter.clear()
        self.declines: dict[int, CustomerDecline] = {}
        self._outcome_rng = random.Random(f"{self._seed}:outcomes")
        self._latency_rng = random.Random(f"{self._seed}:latency")
        # Look-ups draw from their own generators: charges' draws stay as without look-ups.
        self._lookup_rng = random.Random(f"{self._seed}:lookups")
        self._loss_rng = random.Random(f"{self._seed}:webhook-loss")
        self.webhooks_lost = 0
        self.webhooks.seed(f"{self._seed}:webhooks")
        self.salt = f"{random.Random(f'{self._seed}:ids').getrandbits(32):08x}"
        self._events = 0

    def configure(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.limiter.limit = behaviour.rate_limit_per_second

    def count(self, outcome: str) -> None:
        self._calls[outcome].inc()

    def _charge_counted(self, outcome: str) -> None:
        if outcome == "conflict":
            self.ledger.conflicts += 1
        else:
            self.ledger.replays += 1
        self.count(outcome)

    def _refund_counted(self, outcome: str) -> None:
        if outcome == "conflict":
            self.ledger.refund_conflicts += 1
        else:
            self.ledger.refund_replays += 1
        self._refund_calls[outcome].inc()

    def summary(self) -> dict[str, object]:
        return {
            **self.ledger.summary(),
            **self.stall.summary(),
            "ledger_started_at": self.ledger_started_at.isoformat(),
            "webhooks_lost": self.webhooks_lost,
        }

    def admit(self) -> tuple[bool, int]:
        """Rate limit a call arriving now: (admitted, arrival ns); both kinds are recorded."""
        now_ns = self.ledger.clock.now_ns()
        if self.limiter.try_acquire(now_ns):
            self.ledger.record_call(now_ns)
            return True, now_ns
        self.ledger.record_rate_limited(now_ns)
        self._rate_limited.inc()
        self.count("rate_limited")
        return False, now_ns

    def decline_customer(self, customer_id: int, until: datetime | None, code: str) -> None:
        if until is None:
            self.declines.pop(customer_id, None)
        else:
            self.declines[customer_id] = CustomerDecline(until.astimezone(UTC), code)

    def _forced_decline(self, customer_id: int, now: datetime) -> str | None:
        decline = self.declines.get(customer_id)
        if decline is None or now >= decline.until:
            return None
        return decline.code

    async def charge(self, request: ChargeInput) -> Reply:
        return await self._charges.once(
            request.key, request.fingerprint, lambda: self._new_charge(request)
        )

    async def _answer_time(self) -> Behaviour:
        """Once the call's latency has passed and no stall holds answers back: the behaviour
        the answer follows (as it is then)."""
        delay = latency_seconds(self.behaviour, self._latency_rng)
        if delay:
            await asyncio.sleep(delay)
        await self.stall.hold_answer()
        return self.behaviour

    async def _new_charge(self, request: ChargeInput) -> Reply:
        ledger = self.ledger
        behaviour = await self._answer_time()
        now = behaviour.now()
        decision = decide(
            behaviour, self._outcome_rng, self._forced_decline(request.customer_id, now)
        )
        if decision.error_status is not None:
            ledger.server_errors += 1
            self.count("server_error")
            return Reply(decision.error_status, _server_error(decision.error_status), False, 0)
        index = ledger.store(
            request,
            decline_code=decision.decline_code,
            late=decision.late,
            created=int(now.timestamp()),
        )
        if behaviour.webhook_url and not self._webhook_lost(behaviour):
            self.webhooks.publish(self._event(index, now), behaviour)
        if decision.late:
            ledger.timeouts += 1
            self.count("timeout")
            reply = self._answer(index, replayed=False)
            return reply._replace(late_s=behaviour.timeout_delay_seconds)
        self.count("succeeded" if decision.decline_code is None else "declined")
        return self._answer(index, replayed=False)

    async def refund(self, request: RefundInput) -> Reply:
        """The charges' rules, for a refund: a stored key answers its stored result (a refund
        made, or refused for good), another body under it is a conflict, a key in flight makes
        later requests wait for it; a 5xx stores nothing. An unknown charge is 404, more than
        is left to refund of it (or a declined one) 422 — nothing stored."""
        return await self._refunds.once(
            request.key, request.fingerprint, lambda: self._new_refund(request)
        )

    async def _new_refund(self, request: RefundInput) -> Reply:
        ledger = self.ledger
        behaviour = await self._answer_time()
        charge = ledger.charge_index(request.charge_id, self.salt)
        if charge is None:
            self._refund_calls["not_found"].inc()
            detail = f"No charge {request.charge_id!r}; nothing refunded."
            return Reply(404, problem(404, "No such charge", detail), False, 0.0)
        left = ledger.refundable(charge)
        if request.amount > left:
            self._refund_calls["not_refundable"].inc()
            detail = f"{left} is left to refund of {request.charge_id}; nothing refunded."
            return Reply(422, problem(422, "Not refundable", detail), False, 0.0)
        decision = decide_refund(behaviour, self._outcome_rng)
        if decision.error_status is not None:
            ledger.server_errors += 1
            self._refund_calls["server_error"].inc()
            return Reply(decision.error_status, _server_error(decision.error_status), False, 0)
        index = ledger.store_refund(
            request,
            charge,
            failed=decision.failed,
            late=decision.late,
            created=int(behaviour.now().timestamp()),
        )
        reply = self._refund_answer(index, replayed=False)
        if decision.late:
            self._refund_calls["timeout"].inc()
            return reply._replace(late_s=behaviour.timeout_delay_seconds)
        self._refund_calls["failed" if decision.failed else "succeeded"].inc()
        return reply

    def _refund_answer(self, index: int, *, replayed: bool) -> Reply:
        body = self.ledger.refund(index, self.salt)
        if body["status"] == "succeeded":
            return Reply(200, body, replayed, 0.0)
        refused = problem(402, "Refund failed", "The bank refused the refund; nothing refunded.")
        return Reply(402, {**body, **refused, "status": "failed"}, replayed, 0.0)

    def _webhook_lost(self, behaviour: Behaviour) -> bool:
        """With ``webhook_loss_rate``: this result's webhook is never sent (counted)."""
        if behaviour.webhook_loss_rate and self._loss_rng.random() < behaviour.webhook_loss_rate:
            self.webhooks_lost += 1
            return True
        return False

    async def lookup(self, key: str) -> Reply:
        """What happened under ``key``: 200 with the stored charge (as a charge call answers
        it), 404 when the key was never stored (nothing charged: a 5xx stores nothing), 409
        while a charge with it is still being processed, 503 with ``lookup_error_rate``. It
        takes the charge latency; it never charges and never waits for a charge in flight."""
        behaviour = self.behaviour
        delay = latency_seconds(behaviour, self._lookup_rng)
        if delay:
            await asyncio.sleep(delay)
        ledger = self.ledger
        ledger.lookups += 1
        if behaviour.lookup_error_rate and self._lookup_rng.random() < behaviour.lookup_error_rate:
            self._lookups["server_error"].inc()
            ledger.lookup_errors += 1
            return Reply(503, _server_error(503), False, 0.0)
        index = ledger.find(key)
        if index is not None:
            self._lookups["found"].inc()
            ledger.lookups_found += 1
            return Reply(200, ledger.charge(index, self.salt), False, 0.0)
        if key in self._charges.in_flight:
            self._lookups["in_progress"].inc()
            ledger.lookup_errors += 1
            return Reply(409, _in_progress(key), False, 0.0)
        self._lookups["not_found"].inc()
        return Reply(404, _not_found(key), False, 0.0)

    def _answer(self, index: int, *, replayed: bool) -> Reply:
        body = self.ledger.charge(index, self.salt)
        status = 200 if body["status"] == "succeeded" else 402
        return Reply(status, body, replayed, 0.0)

    def _event(self, index: int, now: datetime) -> dict[str, object]:
        self._events += 1
        charge = self.ledger.charge(index, self.salt)
        metadata = charge["metadata"]
        assert isinstance(metadata, dict)
        return {
            "id": f"evt_{self.salt}{self._events:08x}",
            "type": "charge.succeeded" if charge["status"] == "succeeded" else "charge.declined",
            "created": int(now.timestamp()),
            "data": {
                "chargeId": charge["id"],
                "idempotencyKey": charge["idempotencyKey"],
                "invoiceId": metadata["invoiceId"],
                "attempt": metadata["attempt"],
                "customerId": charge["customerId"],
                "amount": charge["amount"],
                "currency": charge["currency"],
                "declineCode": charge["declineCode"],
            },
        }


def problem(status: int, title: str, detail: str) -> dict[str, object]:
    return {"type": "about:blank", "title": title, "status": status, "detail": detail}


def _conflict(key: str) -> dict[str, object]:
    return problem(
        409,
        "Idempotency key reused",
        f"Idempotency-Key {key!r} was used with a different request body.",
    )


def _not_found(key: str) -> dict[str, object]:
    return problem(404, "No such charge", f"No charge was ever made with Idempotency-Key {key!r}.")


def _in_progress(key: str) -> dict[str, object]:
    return problem(
        409,
        "Idempotency key in use",
        f"A charge with Idempotency-Key {key!r} is still being processed; ask again later.",
    )


def _server_error(status: int) -> dict[str, object]:
    return problem(status, "Gateway error", "Simulated gateway failure; nothing was charged.")
