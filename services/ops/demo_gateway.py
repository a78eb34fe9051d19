"""What ``billing demo`` reads from the gateway simulator, each read allowed to fail.

The simulator is another process that can be slow or gone when the demo asks (its event loop
busy at the end of a run, a crash): a read that fails leaves its figure ``None`` and notes why in
:attr:`Gateway.errors`, so the demo still summarises what it knows. After a transport failure
(no connection, a timeout) the remaining reads of that batch are skipped: with generous
timeouts, asking a dead simulator four more times would only make the demo wait minutes longer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

WEBHOOK_DELIVERIES = "billing_gateway_sim_webhook_deliveries_total"
WEBHOOK_RESULTS = ("delivered", "retried", "failed", "dropped")


@dataclass
class GatewayFigures:
    """The simulator's own counters at one moment (``None``: not available)."""

    calls: int | None = None
    rate_limited: int | None = None  # 429 answers
    busiest_second: int | None = None  # admitted calls in the busiest rolling second, ever
    duplicate_invoices: list[int] | None = None  # invoices its audit saw charged twice
    limit: int | None = None  # calls admitted per rolling second; 0 = unlimited
    webhooks: dict[str, int] | None = None  # deliveries by result; {} if not exposed
    per_second: list[dict[str, int]] | None = None


def webhook_deliveries(metrics: str) -> dict[str, int]:
    """Webhook deliveries by result, from the simulator's Prometheus text (``/metrics``)."""
    counts: dict[str, int] = {}
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == WEBHOOK_DELIVERIES and "result" in sample.labels:
                counts[sample.labels["result"]] = int(sample.value)
    return counts


def since(after: int | None, before: int | None) -> int | None:
    """``after - before``, or None when either is unknown."""
    return None if after is None or before is None else after - before


@dataclass
class Gateway:
    url: str
    timeout: float
    errors: list[str] = field(default_factory=list)
    unreachable: bool = False

    async def decline(self, customers: Sequence[int], until: datetime, code: str) -> int:
        """Make these customers' cards decline until ``until``; how many were set."""
        done = 0
        self.unreachable = False
        async with self._client() as client:
            for customer in customers:
                path = f"/v1/admin/customers/{customer}/decline-until"
                if await self._call(
                    client, "POST", path, {"until": until.isoformat(), "code": code}
                ):
                    done += 1
                if self.unreachable:
                    break
        return done

    async def figures(self, *, per_second: bool = False) -> GatewayFigures:
        """The ledger summary, the rate limit, the webhook counters (and calls per second)."""
        figures = GatewayFigures()
        self.unreachable = False
        async with self._client() as client:
            summary = await self._json(client, "/v1/ledger/summary")
            if isinstance(summary, dict):
                figures.calls = _int(summary.get("calls"))
                figures.rate_limited = _int(summary.get("rate_limited_429"))
                figures.busiest_second = _int(summary.get("max_calls_in_any_rolling_second"))
                duplicates = summary.get("duplicate_success_invoices")
                if isinstance(duplicates, list):
                    figures.duplicate_invoices = [int(i) for i in duplicates]
            config = await self._json(client, "/v1/admin/config")
            if isinstance(config, dict):
                figures.limit = _int(config.get("rate_limit_per_second"))
            metrics = await self._call(client, "GET", "/metrics")
            if metrics is not None:
                try:
                    figures.webhooks = webhook_deliveries(metrics.text)
                except ValueError as exc:
                    self.errors.append(f"GET /metrics: not Prometheus text ({exc})")
            if per_second:
                rows = await self._json(client, "/v1/ledger/calls-per-second")
                if isinstance(rows, list):
                    figures.per_second = rows
        return figures

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=self.timeout)

    async def _json(self, client: httpx.AsyncClient, path: str) -> Any:
        response = await self._call(client, "GET", path)
        if response is None:
            return None
        try:
            return response.json()
        except ValueError:
            self.errors.append(f"GET {path}: not JSON")
            return None

    async def _call(
        self, client: httpx.AsyncClient, method: str, path: str, body: object = None
    ) -> httpx.Response | None:
        if self.unreachable:
            return None
        try:
            response = await client.request(method, path, json=body)
            response.raise_for_status()
        except httpx.TransportError as exc:
            self.unreachable = True
            self.errors.append(f"{method} {path}: {_why(exc, self.timeout)}")
            return None
        except httpx.HTTPStatusError as exc:
            self.errors.append(f"{method} {path}: HTTP {exc.response.status_code}")
            return None
        return response


def _why(exc: httpx.TransportError, timeout: float) -> str:
    name = type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        return f"{name} after {timeout:g} s"
    return f"{name} ({exc})" if str(exc) else name


def _int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)
