"""CPU per charge call of the Stripe adapter (the official SDK's async client over httpx)
against the project's own HTTP/1.1 client (the simulator adapter's), both calling stripe-mock
on loopback with the same PaymentIntent request.

Only this process's CPU is counted (``time.process_time``): stripe-mock runs in its own process.
The HTTP/1.1 client sends the same form body and headers and reads the same answer, without the
SDK's layers (request building, httpx, response objects); its parse of the answer is a
``json.loads``, what the simulator adapter does.

    scripts/infra.sh start stripe-mock
    .venv/bin/python -m bench.stripe_client_cpu [--calls 2000] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from urllib.parse import urlencode

from billing_core.http1 import Http1Pool
from billing_core.stripe_gateway import StripeCustomer, StripePaymentGateway, intent_metadata

DEFAULT_URL = "http://127.0.0.1:52111"
API_KEY = "sk_test_123"


async def on_file(customer_id: int) -> StripeCustomer:
    return StripeCustomer("cus_PZrgY7FgXqFqUd", "pm_1OkjqQ2eZvKYlo2C")


def form(n: int) -> bytes:
    metadata = intent_metadata(7, f"inv-{n}-try-0", {"invoiceId": n, "attempt": 0})
    fields = {
        "amount": "990",
        "currency": "eur",
        "customer": "cus_PZrgY7FgXqFqUd",
        "payment_method": "pm_1OkjqQ2eZvKYlo2C",
        "confirm": "true",
        "off_session": "true",
        **{f"metadata[{k}]": v for k, v in metadata.items()},
    }
    return urlencode(fields).encode()


class FormPool(Http1Pool):
    """The same client, sending the form body Stripe's API takes instead of JSON."""

    def request_bytes(self, path: str, body: bytes, headers: Mapping[str, str]) -> bytes:
        request = super().request_bytes(path, body, headers)
        return request.replace(
            b"Content-Type: application/json", b"Content-Type: application/x-www-form-urlencoded", 1
        )


async def run(
    call: Callable[[int], Awaitable[object]], calls: int, concurrency: int
) -> tuple[float, float]:
    """(CPU ms per call, calls per wall-clock second)."""
    queue = iter(range(calls))

    async def worker() -> None:
        for n in queue:
            await call(n)

    for n in range(50):  # warm up: connections open, code paths imported
        await call(-n - 1)
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return cpu * 1000 / calls, calls / wall


async def main(url: str, calls: int, concurrency: int) -> None:
    stripe = StripePaymentGateway(
        API_KEY, customers=on_file, api_base=url, max_connections=concurrency
    )
    sdk = await run(
        lambda n: stripe.charge(7, 990, "EUR", f"inv-{n}-try-0", {"invoiceId": n, "attempt": 0}),
        calls,
        concurrency,
    )
    await stripe.aclose()

    pool = FormPool(url, max_connections=concurrency, connect_timeout=2.0, read_timeout=10.0)

    async def plain(n: int) -> object:
        headers = {
            "Authorization": f"Bearer {API_KEY}",
            "Idempotency-Key": f"inv-{n}-try-0",
        }
        async with pool.hold() as held:
            response = await held.post_json("/v1/payment_intents", form(n), headers)
        assert response.status == 200, response.body[:200]
        return json.loads(response.body)

    plain_result = await run(plain, calls, concurrency)
    await pool.aclose()
    print(f"{'client':<32}{'CPU ms/call':>12}{'calls/s':>10}")
    print(f"{'stripe SDK (async, httpx)':<32}{sdk[0]:>12.3f}{sdk[1]:>10.0f}")
    print(f"{'billing_core.http1':<32}{plain_result[0]:>12.3f}{plain_result[1]:>10.0f}")
    print(f"SDK / http1 CPU per call: {sdk[0] / plain_result[0]:.1f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("BILLING_STRIPE_MOCK_URL", DEFAULT_URL))
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    asyncio.run(main(args.url, args.calls, args.concurrency))
