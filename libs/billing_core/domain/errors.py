"""Domain errors. Free of HTTP: the API maps them to problem responses in one place."""

from __future__ import annotations


class DomainError(Exception):
    """Root of every rule violation raised by billing_core.domain."""


class InvalidAmount(DomainError):
    pass


class CurrencyMismatch(DomainError):
    pass


class InvalidCurrency(DomainError):
    pass


class NaiveDatetime(DomainError):
    pass


class UnknownTimeZone(DomainError):
    pass


class ChangeOutsidePeriod(DomainError):
    pass


class IllegalTransition(DomainError):
    """The action is not allowed in the current state."""


class SubscriptionCanceledError(IllegalTransition):
    pass


class InvoiceNotPayable(IllegalTransition):
    pass


class BeforeAnchor(DomainError):
    pass
