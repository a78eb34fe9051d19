"""What an API client may do: the scopes of its key.

A route needs exactly one scope. Scopes do not imply one another: ``admin`` (key management,
reconciliation) does not by itself allow reading subscriptions; a full-access key holds them all.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from billing_core.domain.errors import DomainError


class Scope(StrEnum):
    PLANS_READ = "plans:read"
    SUBSCRIPTIONS_READ = "subscriptions:read"
    SUBSCRIPTIONS_WRITE = "subscriptions:write"
    PAYMENT_METHODS_WRITE = "payment_methods:write"
    INVOICES_READ = "invoices:read"
    ADMIN = "admin"


ALL_SCOPES: tuple[Scope, ...] = tuple(Scope)

DESCRIPTIONS: dict[Scope, str] = {
    Scope.PLANS_READ: "Read the plan catalogue and coupons.",
    Scope.SUBSCRIPTIONS_READ: "Read subscriptions and their history.",
    Scope.SUBSCRIPTIONS_WRITE: "Subscribe customers, cancel, change plans, redeem coupons.",
    Scope.PAYMENT_METHODS_WRITE: "Set which gateway customer and payment method charge a customer.",
    Scope.INVOICES_READ: "Read a subscription's invoices.",
    Scope.ADMIN: "Manage API keys and coupons; reconciliation.",
}


class UnknownScope(DomainError):
    def __init__(self, value: str) -> None:
        super().__init__(
            f"unknown scope {value!r} (known: {', '.join(str(s) for s in ALL_SCOPES)})"
        )
        self.value = value


def parse_scopes(values: Iterable[str]) -> tuple[Scope, ...]:
    """The scopes named by ``values`` (comma-separated lists allowed), in canonical order;
    ``UnknownScope`` for a name that is not one."""
    wanted: set[Scope] = set()
    for value in values:
        for part in value.split(","):
            name = part.strip()
            if not name:
                continue
            try:
                wanted.add(Scope(name))
            except ValueError as exc:
                raise UnknownScope(name) from exc
    return tuple(s for s in ALL_SCOPES if s in wanted)
