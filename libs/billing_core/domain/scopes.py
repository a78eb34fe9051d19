"""What an API client may do: the scopes of its key.

A route needs exactly one scope. Scopes do not imply one another: ``admin`` (key management,
coupons, reconciliation) does not by itself allow reading subscriptions, and a key makes or
rotates only keys whose scopes it holds itself (:func:`require_held`), so an admin key is never
a way to every scope. A full-access key holds them all (``billing api-keys create`` makes one).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
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
    Scope.SUBSCRIPTIONS_READ: "Read customers, their payment methods and subscriptions.",
    Scope.SUBSCRIPTIONS_WRITE: "Create customers; subscribe, cancel, change plans, pause, "
    "resume, end trials, set tax locations, redeem coupons.",
    Scope.PAYMENT_METHODS_WRITE: "Set which gateway customer and payment method charge a customer.",
    Scope.INVOICES_READ: "Read invoices, their documents and the upcoming one.",
    Scope.ADMIN: "Manage API keys (with at most the key's own scopes) and coupons; the "
    "operator console and its reconciliation queue.",
}


class UnknownScope(DomainError):
    def __init__(self, value: str) -> None:
        super().__init__(
            f"unknown scope {value!r} (known: {', '.join(str(s) for s in ALL_SCOPES)})"
        )
        self.value = value


class ScopeNotHeld(DomainError):
    def __init__(self, missing: Iterable[Scope]) -> None:
        self.missing = tuple(missing)
        super().__init__(
            "a key grants only scopes it holds; this one lacks "
            + ", ".join(str(s) for s in self.missing)
        )


def require_held(granted: Iterable[Scope], held: Collection[Scope]) -> None:
    """``ScopeNotHeld`` unless every scope ``granted`` is one of those ``held``."""
    missing = [s for s in ALL_SCOPES if s in set(granted) and s not in held]
    if missing:
        raise ScopeNotHeld(missing)


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
