"""The simulator's HTTP surface: the gateway contract, the audit ledger and the admin endpoints.

A lean Starlette app (no per-request dependency injection or model validation on the charge
path) so one core serves well over a thousand calls per second.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from billing_core.logging import get_logger
from billing_core.runtime.garbage_collection import quiet_garbage_collector
from services.gateway_sim.behaviour import Behaviour, DeclineCode
from services.gateway_sim.charges import Gateway, Reply, problem
from services.gateway_sim.ledger import ChargeInput, RefundInput
from services.gateway_sim.settings import GatewaySimSettings

log = get_logger(__name__)

BIGINT_MAX = 2**63 - 1
MAX_KEY_LENGTH = 255
CURRENCY = re.compile(r"^[A-Z]{3}$")
JSON = "application/json"
PROBLEM = "application/problem+json"


class InvalidCharge(ValueError):
    pass


class StallOrder(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seconds: float = Field(gt=0, le=600)


class DeclineUntil(BaseModel):
    model_config = ConfigDict(extra="forbid")

    until: AwareDatetime | None
    code: DeclineCode = "card_declined"


def _json(status: int, body: object, headers: dict[str, str] | None = None) -> Response:
    media = PROBLEM if status >= 400 and status != 402 else JSON
    content = json.dumps(body, separators=(",", ":")).encode()
    return Response(content, status_code=status, media_type=media, headers=headers)


def _problem(
    status: int, title: str, detail: str, headers: dict[str, str] | None = None, **extra: Any
) -> Response:
    return _json(status, {**problem(status, title, detail), **extra}, headers)


def _invalid(title: str, detail: str, exc: ValidationError) -> Response:
    """A 422 problem listing pydantic's errors (without the input, which may hold a secret)."""
    return _problem(
        422, title, detail, errors=json.loads(exc.json(include_url=False, include_input=False))
    )


def _int(value: object, name: str, low: int, high: int = BIGINT_MAX) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidCharge(f"{name} must be an integer in [{low}, {high}]")
    return value


def _parsed(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise InvalidCharge("the body is not JSON") from exc


def _keyed_object(key: str | None, raw: bytes) -> tuple[str, dict[str, Any]]:
    """The key and JSON object of a request that needs an Idempotency-Key, or raise
    InvalidCharge."""
    if not key or len(key) > MAX_KEY_LENGTH:
        raise InvalidCharge(f"an Idempotency-Key header of 1 to {MAX_KEY_LENGTH} chars is required")
    body = _parsed(raw)
    if not isinstance(body, dict):
        raise InvalidCharge("the body must be a JSON object")
    return key, body


def _fingerprint(body: dict[str, Any]) -> int:
    """A hash of the body's canonical JSON: the same request under a key has the same one."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return int.from_bytes(hashlib.blake2b(canonical, digest_size=8).digest(), "big", signed=True)


def parse_charge(key: str | None, raw: bytes) -> ChargeInput:
    """Validate a ``POST /v1/charges`` request (header + JSON body) or raise InvalidCharge."""
    key, body = _keyed_object(key, raw)
    currency = body.get("currency")
    if not isinstance(currency, str) or not CURRENCY.match(currency):
        raise InvalidCharge("currency must be an ISO-4217 code (three capital letters)")
    metadata = body.get("metadata")
    if not isinstance(metadata, dict):
        raise InvalidCharge("metadata must be an object with invoiceId and attempt")
    return ChargeInput(
        key=key,
        customer_id=_int(body.get("customerId"), "customerId", 0),
        amount=_int(body.get("amount"), "amount", 1),
        currency=currency,
        invoice_id=_int(metadata.get("invoiceId"), "metadata.invoiceId", 0),
        attempt=_int(metadata.get("attempt"), "metadata.attempt", 0),
        fingerprint=_fingerprint(body),
    )


def parse_refund(key: str | None, raw: bytes) -> RefundInput:
    """Validate a ``POST /v1/refunds`` request (header + JSON body) or raise InvalidCharge."""
    key, body = _keyed_object(key, raw)
    charge_id = body.get("chargeId")
    if not isinstance(charge_id, str) or not 0 < len(charge_id) <= MAX_KEY_LENGTH:
        raise InvalidCharge("chargeId must be the id of a charge")
    return RefundInput(
        key=key,
        charge_id=charge_id,
        amount=_int(body.get("amount"), "amount", 1),
        fingerprint=_fingerprint(body),
    )


def parse_lookup(raw: bytes) -> str:
    """The key of a ``POST /v1/charges/lookup`` request, or raise InvalidCharge."""
    body = _parsed(raw)
    key = body.get("idempotencyKey") if isinstance(body, dict) else None
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY_LENGTH:
        raise InvalidCharge(f"idempotencyKey must be a string of 1 to {MAX_KEY_LENGTH} chars")
    return key


class Handlers:
    """The simulator's HTTP endpoints, over one :class:`Gateway`."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    async def _gate(self, *, outcome: str, counted: bool) -> Response | None:
        """What every call to the gateway passes first, charges, refunds and look-ups alike: a
        stall, the rolling-second limit (429), the credentials (401). None when the call may go
        on; else the refusal, whose words end with ``outcome`` ("nothing charged")."""
        gateway = self.gateway
        tail = f"; {outcome}." if outcome else "."
        await gateway.stall.hold_arrival()
        admitted, now_ns = gateway.admit()
        if not admitted:
            wait = gateway.limiter.retry_after_seconds(now_ns)
            return _problem(
                429,
                "Too Many Requests",
                f"More than {gateway.limiter.limit} calls in the last second{tail}",
                headers={"Retry-After": str(max(1, math.ceil(wait)))},
            )
        if gateway.behaviour.reject_credentials:
            gateway.ledger.unauthorized += 1
            if counted:
                gateway.count("unauthorized")
            return _problem(401, "Unauthorized", f"The API key was revoked{tail}")
        return None

    @staticmethod
    async def _reply(reply: Reply) -> Response:
        """A stored result as the gateway answers it: late when it was drawn late."""
        if reply.late_s:
            await asyncio.sleep(reply.late_s)
        headers = {"Idempotent-Replayed": "true"} if reply.replayed else None
        return _json(reply.status, reply.body, headers)

    async def create_charge(self, request: Request) -> Response:
        refused = await self._gate(outcome="nothing charged", counted=True)
        if refused is not None:
            return refused
        try:
            charge = parse_charge(request.headers.get("idempotency-key"), await request.body())
        except InvalidCharge as exc:
            self.gateway.ledger.invalid += 1
            self.gateway.count("invalid")
            return _problem(400, "Invalid charge request", str(exc))
        return await self._reply(await self.gateway.charge(charge))

    async def create_refund(self, request: Request) -> Response:
        """Refunds go through the same gate as charges: the rolling-second limit, the
        credentials, a stall."""
        refused = await self._gate(outcome="nothing refunded", counted=False)
        if refused is not None:
            return refused
        try:
            refund = parse_refund(request.headers.get("idempotency-key"), await request.body())
        except InvalidCharge as exc:
            self.gateway.ledger.invalid += 1
            return _problem(400, "Invalid refund request", str(exc))
        return await self._reply(await self.gateway.refund(refund))

    async def ledger_refunds(self, request: Request) -> Response:
        ledger = self.gateway.ledger
        try:
            invoice = int(request.query_params["invoiceId"])
        except (KeyError, ValueError):
            return _problem(400, "Invalid query", "give invoiceId, an integer")
        return _json(
            200, [ledger.refund(i, self.gateway.salt) for i in ledger.refunds_of_invoice(invoice)]
        )

    async def refunds_by_invoice(self, _: Request) -> Response:
        counts = self.gateway.ledger.refunds_by_invoice()
        return _json(200, [[invoice, n] for invoice, n in sorted(counts.items())])

    async def lookup_charge(self, request: Request) -> Response:
        """``POST /v1/charges/lookup {"idempotencyKey": K}``: a call like a charge (rate
        limited, counted, refused without credentials), answered from the ledger by key."""
        refused = await self._gate(outcome="", counted=True)
        if refused is not None:
            return refused
        gateway = self.gateway
        try:
            key = parse_lookup(await request.body())
        except InvalidCharge as exc:
            gateway.ledger.invalid += 1
            gateway.count("invalid")
            return _problem(400, "Invalid look-up request", str(exc))
        reply = await gateway.lookup(key)
        return _json(reply.status, reply.body)

    async def ledger_summary(self, _: Request) -> Response:
        return _json(200, self.gateway.summary())

    async def ledger_charges(self, request: Request) -> Response:
        ledger = self.gateway.ledger
        invoice = request.query_params.get("invoiceId")
        key = request.query_params.get("idempotencyKey")
        if invoice is not None:
            try:
                indexes = ledger.charges_of_invoice(int(invoice))
            except ValueError:
                return _problem(400, "Invalid query", "invoiceId must be an integer")
        elif key is not None:
            found = ledger.find(key)
            indexes = [] if found is None else [found]
        else:
            return _problem(400, "Invalid query", "give invoiceId or idempotencyKey")
        return _json(
            200,
            [{**ledger.charge(i, self.gateway.salt), "late": ledger.late(i)} for i in indexes],
        )

    async def successes_by_invoice(self, _: Request) -> Response:
        counts = self.gateway.ledger.successes_by_invoice()
        return _json(200, [[invoice, n] for invoice, n in sorted(counts.items())])

    async def calls_per_second(self, _: Request) -> Response:
        return _json(200, self.gateway.ledger.calls_per_second())

    async def get_config(self, _: Request) -> Response:
        return _json(200, self.gateway.behaviour.public())

    async def set_config(self, request: Request) -> Response:
        try:
            patch = json.loads(await request.body())
            if not isinstance(patch, dict):
                raise ValueError("not an object")
        except ValueError:
            return _problem(400, "Invalid configuration", "the body must be a JSON object")
        try:
            updated = Behaviour.model_validate({**self.gateway.behaviour.model_dump(), **patch})
        except ValidationError as exc:
            return _invalid("Invalid configuration", "the configuration was not changed", exc)
        self.gateway.configure(updated)
        log.info("config_changed", changed=sorted(patch))
        return _json(200, updated.public())

    async def decline_until(self, request: Request) -> Response:
        customer_id = int(request.path_params["customer_id"])
        try:
            order = DeclineUntil.model_validate_json(await request.body())
        except ValidationError as exc:
            return _invalid(
                "Invalid decline order",
                'expected {"until": ISO-8601 with offset | null, "code": "..."}',
                exc,
            )
        self.gateway.decline_customer(customer_id, order.until, order.code)
        return _json(
            200,
            {
                "customerId": customer_id,
                "until": None if order.until is None else order.until.isoformat(),
                "code": order.code,
                "active": order.until is not None and self.gateway.behaviour.now() < order.until,
            },
        )

    async def stall(self, request: Request) -> Response:
        try:
            order = StallOrder.model_validate_json(await request.body())
        except ValidationError as exc:
            return _invalid("Invalid stall order", 'expected {"seconds": in (0, 600]}', exc)
        self.gateway.stall.begin(order.seconds)
        log.info("stall_started", seconds=order.seconds)
        return _json(200, {"stalledForSeconds": order.seconds})

    async def reset(self, _: Request) -> Response:
        await self.gateway.webhooks.cancel_pending()
        self.gateway.reset()
        log.info("reset")
        return _json(200, {"reset": True})

    async def healthz(self, _: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def metrics(self, _: Request) -> Response:
        return Response(generate_latest(self.gateway.registry), media_type=CONTENT_TYPE_LATEST)


def create_app(settings: GatewaySimSettings) -> Starlette:
    gateway = Gateway(
        behaviour=settings.behaviour(),
        seed=settings.seed,
        webhook_concurrency=settings.webhook_concurrency,
        max_pending_webhooks=settings.webhook_max_pending,
    )
    h = Handlers(gateway)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await gateway.webhooks.start()
        quiet_garbage_collector()  # its clock stamps arrivals: no long pause may bunch them
        log.info(
            "gateway_sim_listening",
            host=settings.host,
            port=settings.port,
            seed=settings.seed,
            **{k: v for k, v in gateway.behaviour.public().items() if k != "decline_codes"},
        )
        try:
            yield
        finally:
            await gateway.webhooks.stop()

    app = Starlette(
        routes=[
            Route("/v1/charges", h.create_charge, methods=["POST"]),
            Route("/v1/charges/lookup", h.lookup_charge, methods=["POST"]),
            Route("/v1/refunds", h.create_refund, methods=["POST"]),
            Route("/v1/ledger/refunds", h.ledger_refunds, methods=["GET"]),
            Route("/v1/ledger/refunds-by-invoice", h.refunds_by_invoice, methods=["GET"]),
            Route("/v1/ledger/summary", h.ledger_summary, methods=["GET"]),
            Route("/v1/ledger/charges", h.ledger_charges, methods=["GET"]),
            Route("/v1/ledger/calls-per-second", h.calls_per_second, methods=["GET"]),
            Route("/v1/ledger/successes-by-invoice", h.successes_by_invoice, methods=["GET"]),
            Route("/v1/admin/config", h.get_config, methods=["GET"]),
            Route("/v1/admin/config", h.set_config, methods=["POST"]),
            Route(
                "/v1/admin/customers/{customer_id:int}/decline-until",
                h.decline_until,
                methods=["POST"],
            ),
            Route("/v1/admin/stall", h.stall, methods=["POST"]),
            Route("/v1/admin/reset", h.reset, methods=["POST"]),
            Route("/healthz", h.healthz, methods=["GET"]),
            Route("/metrics", h.metrics, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    app.state.gateway = gateway
    return app
