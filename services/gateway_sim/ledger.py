"""The simulator's memory: the idempotency store (every charge result, by key) and the audit log of
calls, kept in process memory (a restart or ``POST /v1/admin/reset`` clears it).

Charges are stored column-wise (``array`` of int64 per field, small integer codes for currencies
and outcomes): a charge costs its key string, two dict slots (by key; last charge of its invoice)
and about 60 bytes of columns -- about 300 bytes in all, so 3 million charges take under 1 GB.
A call is one int64 timestamp (admitted and rate-limited calls in two arrays, in arrival order).

Timestamps are nanoseconds on a monotonic clock anchored to the wall clock at start: they never go
backwards (the limiter and the rolling-second audit see the same instants) and their second is
the real arrival second (the admin clock offset does not move them).
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from heapq import merge

from services.gateway_sim.limiter import WINDOW_NS

SUCCEEDED = 0  # outcome code; a decline is 1 + the index of its code in _codes


@dataclass(frozen=True, slots=True)
class ChargeInput:
    """A validated charge request. ``fingerprint``: a hash of the canonical JSON body."""

    key: str
    customer_id: int
    amount: int
    currency: str
    invoice_id: int
    attempt: int
    fingerprint: int


@dataclass(frozen=True, slots=True)
class RefundInput:
    """A validated refund request. ``fingerprint``: a hash of the canonical JSON body."""

    key: str
    charge_id: str
    amount: int
    fingerprint: int


@dataclass(frozen=True, slots=True)
class StoredRefund:
    key: str
    fingerprint: int
    charge: int  # the charge's index
    amount: int
    failed: bool
    late: bool
    created: int


class ArrivalClock:
    """Monotonic nanoseconds, anchored to the wall clock once."""

    def __init__(self) -> None:
        self._wall0 = time.time_ns()
        self._mono0 = time.monotonic_ns()

    def now_ns(self) -> int:
        return self._wall0 + (time.monotonic_ns() - self._mono0)


def max_in_any_window(stamps: Iterable[int], window_ns: int = WINDOW_NS) -> int:
    """The largest number of stamps in any half-open window ``(t - window, t]`` (stamps sorted).

    Two pointers: the window ending at each stamp holds the stamps after the first one that is
    more than ``window`` older; every window's count is at most that of the one ending at its
    latest stamp, so this is the maximum over all windows.
    """
    sorted_stamps = list(stamps) if not isinstance(stamps, array) else stamps
    best = 0
    first = 0
    for last, stamp in enumerate(sorted_stamps):
        cutoff = stamp - window_ns
        while sorted_stamps[first] <= cutoff:
            first += 1
        best = max(best, last - first + 1)
    return best


class Ledger:
    def __init__(self) -> None:
        self.clock = ArrivalClock()
        self.clear()

    def clear(self) -> None:
        self._by_key: dict[str, int] = {}
        self._keys: list[str] = []
        self._fingerprint = array("q")
        self._invoice = array("q")
        self._attempt = array("q")
        self._customer = array("q")
        self._amount = array("q")
        self._currency = array("H")
        self._outcome = array("H")
        self._late = bytearray()
        self._created = array("q")
        self._prev_same_invoice = array("q")  # previous charge of the invoice, -1 if none
        self._last_by_invoice: dict[int, int] = {}
        self._succeeded = 0
        self._duplicate_success_invoices: set[int] = set()
        self._currencies: list[str] = []
        self._codes: list[str] = []
        self._arrivals = array("q")
        self._rejected = array("q")
        self.replays = 0
        self.conflicts = 0
        self.server_errors = 0
        self.timeouts = 0
        self.invalid = 0
        self.unauthorized = 0
        self.lookups = 0
        self.lookups_found = 0
        self.lookup_errors = 0
        self._refunds: list[StoredRefund] = []
        self._refund_by_key: dict[str, int] = {}
        self._refunded: dict[int, int] = {}  # charge index -> amount refunded
        self.refund_replays = 0
        self.refund_conflicts = 0

    # -- calls -----------------------------------------------------------------------------

    def record_call(self, at_ns: int) -> None:
        self._arrivals.append(at_ns)

    def record_rate_limited(self, at_ns: int) -> None:
        self._rejected.append(at_ns)

    # -- charges ---------------------------------------------------------------------------

    def find(self, key: str) -> int | None:
        return self._by_key.get(key)

    def fingerprint(self, index: int) -> int:
        return self._fingerprint[index]

    def store(
        self, charge: ChargeInput, *, decline_code: str | None, late: bool, created: int
    ) -> int:
        """Store a charge result under its key (the caller made sure the key is new)."""
        index = len(self._keys)
        self._by_key[charge.key] = index
        self._keys.append(charge.key)
        self._fingerprint.append(charge.fingerprint)
        self._invoice.append(charge.invoice_id)
        self._attempt.append(charge.attempt)
        self._customer.append(charge.customer_id)
        self._amount.append(charge.amount)
        self._currency.append(_code_of(self._currencies, charge.currency))
        self._outcome.append(
            SUCCEEDED if decline_code is None else 1 + _code_of(self._codes, decline_code)
        )
        self._late.append(1 if late else 0)
        self._created.append(created)
        previous = self._last_by_invoice.get(charge.invoice_id, -1)
        self._prev_same_invoice.append(previous)
        self._last_by_invoice[charge.invoice_id] = index
        if decline_code is None:
            self._succeeded += 1
            # An invoice has a handful of attempts: walking its chain is cheaper than a counter.
            while previous >= 0:
                if self._outcome[previous] == SUCCEEDED:
                    self._duplicate_success_invoices.add(charge.invoice_id)
                    break
                previous = self._prev_same_invoice[previous]
        return index

    def charge_id(self, index: int, salt: str) -> str:
        return f"ch_{salt}{index:08x}"

    def charge(self, index: int, salt: str) -> dict[str, object]:
        """The stored result as the gateway answers it (and as the ledger lists it)."""
        outcome = self._outcome[index]
        return {
            "id": self.charge_id(index, salt),
            "status": "succeeded" if outcome == SUCCEEDED else "declined",
            "declineCode": None if outcome == SUCCEEDED else self._codes[outcome - 1],
            "amount": self._amount[index],
            "currency": self._currencies[self._currency[index]],
            "customerId": self._customer[index],
            "idempotencyKey": self._keys[index],
            "metadata": {"invoiceId": self._invoice[index], "attempt": self._attempt[index]},
            "created": self._created[index],
        }

    def succeeded(self, index: int) -> bool:
        return self._outcome[index] == SUCCEEDED

    def charges_of_invoice(self, invoice_id: int) -> list[int]:
        found: list[int] = []
        index = self._last_by_invoice.get(invoice_id, -1)
        while index >= 0:
            found.append(index)
            index = self._prev_same_invoice[index]
        found.reverse()
        return found

    def late(self, index: int) -> bool:
        return bool(self._late[index])

    def successes_by_invoice(self) -> dict[int, int]:
        """Successful charges per invoice, over every key (the auditor's evidence)."""
        counts: dict[int, int] = {}
        for index, outcome in enumerate(self._outcome):
            if outcome == SUCCEEDED:
                invoice = self._invoice[index]
                counts[invoice] = counts.get(invoice, 0) + 1
        return counts

    # -- refunds ---------------------------------------------------------------------------

    def charge_index(self, charge_id: str, salt: str) -> int | None:
        """The index of the charge ``charge_id`` names, or None when there is no such charge."""
        prefix = f"ch_{salt}"
        if not charge_id.startswith(prefix):
            return None
        try:
            index = int(charge_id[len(prefix) :], 16)
        except ValueError:
            return None
        return index if 0 <= index < len(self._keys) else None

    def find_refund(self, key: str) -> int | None:
        return self._refund_by_key.get(key)

    def stored_refund(self, index: int) -> StoredRefund:
        return self._refunds[index]

    def refundable(self, charge: int) -> int:
        """What is left to refund of a charge (0 for a declined one)."""
        if self._outcome[charge] != SUCCEEDED:
            return 0
        return self._amount[charge] - self._refunded.get(charge, 0)

    def store_refund(
        self, request: RefundInput, charge: int, *, failed: bool, late: bool, created: int
    ) -> int:
        """Store a refund result under its key (the caller made sure the key is new)."""
        index = len(self._refunds)
        self._refunds.append(
            StoredRefund(
                request.key, request.fingerprint, charge, request.amount, failed, late, created
            )
        )
        self._refund_by_key[request.key] = index
        if not failed:
            self._refunded[charge] = self._refunded.get(charge, 0) + request.amount
        return index

    def refund(self, index: int, salt: str) -> dict[str, object]:
        """The stored refund as the gateway answers it (and as the ledger lists it)."""
        stored = self._refunds[index]
        charge = stored.charge
        return {
            "id": f"re_{salt}{index:08x}",
            "object": "refund",
            "status": "failed" if stored.failed else "succeeded",
            "chargeId": self.charge_id(charge, salt),
            "amount": stored.amount,
            "currency": self._currencies[self._currency[charge]],
            "idempotencyKey": stored.key,
            "metadata": {"invoiceId": self._invoice[charge], "attempt": self._attempt[charge]},
            "created": stored.created,
        }

    def refunds_of_invoice(self, invoice_id: int) -> list[int]:
        charges = set(self.charges_of_invoice(invoice_id))
        return [i for i, r in enumerate(self._refunds) if r.charge in charges]

    def refunds_by_invoice(self) -> dict[int, int]:
        """Successful refunds per invoice (the auditor's evidence that money went back)."""
        counts: dict[int, int] = {}
        for refund in self._refunds:
            if not refund.failed:
                invoice = self._invoice[refund.charge]
                counts[invoice] = counts.get(invoice, 0) + 1
        return counts

    # -- audits ----------------------------------------------------------------------------

    def summary(self) -> dict[str, object]:
        successes = self._succeeded
        amounts: dict[str, int] = {}
        for index in range(len(self._keys)):
            if self._outcome[index] == SUCCEEDED:
                currency = self._currencies[self._currency[index]]
                amounts[currency] = amounts.get(currency, 0) + self._amount[index]
        return {
            "calls": len(self._arrivals),
            "charges_succeeded": successes,
            "declines": len(self._keys) - successes,
            "rate_limited_429": len(self._rejected),
            "max_calls_in_any_rolling_second": max_in_any_window(self._arrivals),
            "max_arrivals_in_any_rolling_second": max_in_any_window(
                merge(self._arrivals, self._rejected)
            ),
            "duplicate_success_invoices": sorted(self._duplicate_success_invoices),
            "replays": self.replays,
            "conflicts": self.conflicts,
            "server_errors": self.server_errors,
            "timeouts": self.timeouts,
            "invalid_requests": self.invalid,
            "unauthorized": self.unauthorized,
            "lookups": self.lookups,
            "lookups_found": self.lookups_found,
            "lookup_errors": self.lookup_errors,
            "amount_succeeded": amounts,
            "refunds_succeeded": sum(1 for r in self._refunds if not r.failed),
            "refunds_failed": sum(1 for r in self._refunds if r.failed),
            "refund_replays": self.refund_replays,
            "refund_conflicts": self.refund_conflicts,
            "amount_refunded": self._amount_refunded(),
        }

    def _amount_refunded(self) -> dict[str, int]:
        amounts: dict[str, int] = {}
        for refund in self._refunds:
            if not refund.failed:
                currency = self._currencies[self._currency[refund.charge]]
                amounts[currency] = amounts.get(currency, 0) + refund.amount
        return amounts

    def calls_per_second(self) -> list[dict[str, int]]:
        calls = _per_second(self._arrivals)
        limited = _per_second(self._rejected)
        return [
            {
                "second": second,
                "calls": calls.get(second, 0),
                "rate_limited": limited.get(second, 0),
            }
            for second in sorted(calls.keys() | limited.keys())
        ]


def _code_of(table: list[str], value: str) -> int:
    try:
        return table.index(value)
    except ValueError:
        table.append(value)
        return len(table) - 1


def _per_second(stamps: Iterator[int] | array[int]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for stamp in stamps:
        second = stamp // 1_000_000_000
        counts[second] = counts.get(second, 0) + 1
    return counts
