"""The webhook receiver (``POST /webhooks/payments``) next to the same server's /healthz floor.

Starts the API (``python -m services.api``, one worker) on a fresh, migrated database holding N
OPEN invoices (each with the collector's uncertain answer for its attempt 0: the attempt was
sent), then drives it from a separate load-generator process (the keep-alive client of
``bench.api_bench``) with correctly signed ``charge.succeeded`` events, one per invoice and a new
event id each: the first pass pays the invoices (the APPLIED path), later passes find them PAID
(the ALREADY_PAID path: what most webhooks meet in production, the collector having recorded the
answer first). A last pass sends events at the gateway's 200/s on a fixed schedule (open loop):
the CPU per event the whole 1st-of-the-month pipeline pays, where groups are small. CPU per event
comes from the server's /proc times over each run.

Printed: events/s, p50, p99, the ratio to /healthz, CPU ms per event, and whether one API process
sustains 3x the gateway's 200 calls/s (the target in docs/BENCHMARKS.md).

    make bench-webhook        # or: python -m bench.webhook_bench --runs 3 --seconds 5
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from datetime import UTC, datetime
from typing import Any

from bench.api_bench import (
    Result,
    api_server,
    bench_arguments,
    build,
    closed_loop_over,
    in_load_process,
    migrated_database,
    open_loop_over,
)
from bench.procfs import cpu_seconds
from billing_core.db import pg
from billing_core.db.arrays import int_array
from billing_core.domain.charge_result import idempotency_key
from billing_core.settings import CoreSettings
from services.api.signatures import sign_header
from tests.support.factories import due_subscriptions_with_invoices

SECRET = "bench-webhook-secret"
GATEWAY_LIMIT = 200


def webhook_request(host: str, invoice_id: int, event_no: int) -> bytes:
    body = json.dumps(
        {
            "id": f"evt_bench_{event_no:010d}",
            "type": "charge.succeeded",
            "created": int(time.time()),
            "data": {
                "chargeId": f"ch_bench_{invoice_id}",
                "idempotencyKey": idempotency_key(invoice_id, 0),
                "invoiceId": invoice_id,
                "attempt": 0,
                "customerId": invoice_id,
                "amount": 990,
                "currency": "EUR",
                "declineCode": None,
            },
        },
        separators=(",", ":"),
    ).encode()
    signature = sign_header(SECRET.encode(), int(time.time()), body)
    return build("POST", "/webhooks/payments", host, "-", body, **{"Billing-Signature": signature})


async def closed_loop(
    host: str, port: int, requests: list[bytes], concurrency: int, seconds: float
) -> Result:
    queue = iter(requests)
    return await closed_loop_over(host, port, lambda: next(queue, None), concurrency, seconds)


async def open_loop(
    host: str, port: int, requests: list[bytes], rate: float, seconds: float, **_: Any
) -> Result:
    """``requests`` sent on a fixed schedule (``rate`` per second), whatever the answers' pace:
    the webhooks a gateway sends while it charges at its limit. Latency includes queueing."""
    queue = iter(requests)
    n = min(len(requests), int(rate * seconds))
    return await open_loop_over(host, port, lambda: next(queue), n, rate)


def _load_main(args: dict[str, Any], out: Any) -> None:
    kind = args.pop("kind", "closed")
    rate = args.pop("rate")
    if kind == "closed":
        out.send(asyncio.run(closed_loop(**args)))
    else:
        out.send(asyncio.run(open_loop(**args, rate=rate)))


def run_load(**kwargs: Any) -> Result:
    return in_load_process(_load_main, kwargs)


# The collector's call of each invoice's attempt 0 timed out (an uncertain answer recorded
# under its key): the attempt was sent, and the webhook brings its result.
_SENT = pg.Statement(
    """
    INSERT INTO payment_attempt (invoice_id, attempt_number, idempotency_key, source, outcome,
                                 amount, currency, error, recorded_at)
    SELECT id, 0, 'inv-' || id || '-try-0', 'COLLECTOR', 'UNKNOWN', amount, currency,
           'timeout', :now
    FROM invoice JOIN unnest(CAST(:ids AS text)::bigint[]) AS sent(invoice_id) ON id = invoice_id
    """
)


async def seed_invoices(url: str, n: int) -> list[int]:
    pool = await pg.create_pool(
        CoreSettings(database_url=url, process_name="bench.webhook"), max_size=1
    )
    now = datetime.now(UTC)
    try:
        async with pg.transaction(pool) as conn:
            ids = await due_subscriptions_with_invoices(conn, n, now=now)
            await pg.execute(conn, _SENT, {"ids": int_array(ids), "now": now})
            return ids
    finally:
        await pool.close()


# Open-loop scenarios: events offered on a fixed schedule at this many per second.
OPEN_LOOP = {"at 200/s": GATEWAY_LIMIT, "at 600/s": 3 * GATEWAY_LIMIT}
# Offered events are sustained when they are all answered at (nearly) their pace: a receiver
# slower than the offer falls behind, and the run's last answers come that much later.
SUSTAINED = 0.98


def main() -> None:
    parser = bench_arguments(__doc__.split("\n\n")[0], "billing_bench_webhook")
    parser.add_argument("--invoices", type=int, default=30_000)
    args = parser.parse_args()

    migrated_database(args.database_url)
    invoices = asyncio.run(seed_invoices(args.database_url, args.invoices))
    host = "127.0.0.1"
    event_no = 0
    with api_server(args.database_url, BILLING_WEBHOOK_SECRETS=SECRET) as server:
        rows: dict[str, list[tuple[Result, float]]] = {
            "healthz": [],
            "applied": [],
            "paid": [],
            "at 200/s": [],  # paying OPEN invoices, open loop at the gateway's rate
            "at 600/s": [],  # paying OPEN invoices, open loop at the target rate
        }
        unpaid = iter(invoices)  # "applied": each event pays an OPEN invoice
        paid: list[int] = []  # "paid": a new event for an invoice already PAID
        for run in range(args.runs):
            for scenario, results in rows.items():
                if scenario == "healthz":
                    requests = [build("GET", "/healthz", host, "-")] * 200_000
                else:
                    targets = paid * 20 if scenario == "paid" else list(unpaid)
                    wanted = targets
                    if scenario in OPEN_LOOP:
                        wanted = targets[: int(OPEN_LOOP[scenario] * args.seconds)]
                    requests = []
                    for invoice in wanted:
                        event_no += 1
                        requests.append(webhook_request(host, invoice, event_no))
                cpu_before = cpu_seconds(server.pid)
                r = run_load(
                    kind="open" if scenario in OPEN_LOOP else "closed",
                    host=host,
                    port=server.port,
                    requests=requests,
                    concurrency=args.concurrency,
                    rate=OPEN_LOOP.get(scenario, 0),
                    seconds=args.seconds,
                )
                cpu_ms = (cpu_seconds(server.pid) - cpu_before) * 1000 / max(1, r.requests)
                results.append((r, cpu_ms))
                if scenario not in ("healthz", "paid"):  # the first r.requests were sent
                    paid.extend(targets[: r.requests])
                    unpaid = iter(targets[r.requests :])
                print(
                    f"run {run + 1} {scenario:8s} {r.rps:8.0f} req/s  p50 {r.pct(0.5):6.1f} ms  "
                    f"p99 {r.pct(0.99):6.1f} ms  cpu {cpu_ms:5.2f} ms/req  errors {r.errors}"
                )
        med = {
            s: {
                "rps": statistics.median(r.rps for r, _ in rs),
                "p50": statistics.median(r.pct(0.5) for r, _ in rs),
                "p99": statistics.median(r.pct(0.99) for r, _ in rs),
                "cpu_ms": statistics.median(c for _, c in rs),
            }
            for s, rs in rows.items()
        }
        floor = med["healthz"]["rps"]
        print()
        print(
            f"concurrency {args.concurrency}, {args.seconds:.0f} s per run, medians of {args.runs}"
        )
        print(f"{'':10s}{'req/s':>9s}{'p50 ms':>9s}{'p99 ms':>9s}{'x healthz':>11s}{'cpu ms':>9s}")
        for scenario, m in med.items():
            print(
                f"{scenario:10s}{m['rps']:9.0f}{m['p50']:9.1f}{m['p99']:9.1f}"
                f"{m['rps'] / floor:11.2f}{m['cpu_ms']:9.2f}"
            )
        errors = sum(r.errors for rs in rows.values() for r, _ in rs)
        print(f"errors: {errors}")
        steady = med["at 200/s"]
        print(
            f"at the gateway's {GATEWAY_LIMIT}/s (open loop, the whole pipeline's case): "
            f"{steady['cpu_ms']:.2f} ms CPU per event, p99 {steady['p99']:.0f} ms"
        )
        target = 3 * GATEWAY_LIMIT
        offered = med[f"at {target}/s"]
        sustained = offered["rps"] >= SUSTAINED * target
        print(
            f"  {'PASS' if sustained else 'FAIL'}  sustains {target} events/s on one process "
            f"(offered at {target}/s paying OPEN invoices: {offered['rps']:.0f}/s answered "
            f">= {SUSTAINED * target:.0f}, p99 {offered['p99']:.0f} ms)"
        )
        for scenario in ("applied", "paid", f"at {target}/s"):
            cpu_ms = med[scenario]["cpu_ms"]
            print(
                f"  {'PASS' if cpu_ms <= 1.0 else 'FAIL'}  {scenario}: {cpu_ms:.2f} ms CPU "
                "per event (<= 1.0)"
            )
    if errors:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
