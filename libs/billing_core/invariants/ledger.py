"""The payment gateway's own evidence: how many successful charges each invoice got.

The gateway simulator keeps an audit ledger of every charge it stored, whatever its callers
recorded. ``fetch_ledger`` reads it over HTTP (``GET /v1/ledger/successes-by-invoice`` for the
counts, ``GET /v1/ledger/summary`` for the simulator's own duplicate audit); tests may build a
:class:`LedgerEvidence` directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

import httpx


@dataclass(frozen=True)
class LedgerEvidence:
    successes: Mapping[int, int]  # invoice id -> successful charges, over all its keys
    duplicate_success_invoices: list[int] = field(default_factory=list)  # the gateway's audit
    # When the gateway's ledger began (a simulator's starts empty with its process or a reset):
    # a payment made before it has no evidence there.
    started_at: datetime | None = None

    @classmethod
    def from_charges(cls, charges: Iterable[Mapping[str, object]]) -> LedgerEvidence:
        """From ledger entries as the gateway lists them (``/v1/ledger/charges``)."""
        counts: dict[int, int] = {}
        for charge in charges:
            metadata = charge.get("metadata")
            if charge.get("status") != "succeeded" or not isinstance(metadata, Mapping):
                continue
            invoice = int(str(metadata["invoiceId"]))
            counts[invoice] = counts.get(invoice, 0) + 1
        return cls(counts, sorted(i for i, n in counts.items() if n > 1))


async def fetch_ledger(gateway_url: str, *, timeout: float = 120.0) -> LedgerEvidence:
    async with httpx.AsyncClient(base_url=gateway_url, timeout=timeout) as client:
        counts = (await client.get("/v1/ledger/successes-by-invoice")).raise_for_status().json()
        summary = (await client.get("/v1/ledger/summary")).raise_for_status().json()
    return LedgerEvidence(
        successes={int(invoice): int(n) for invoice, n in counts},
        duplicate_success_invoices=[int(i) for i in summary["duplicate_success_invoices"]],
        started_at=_instant(summary.get("ledger_started_at")),
    )


def _instant(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo is not None else None
