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
    """A datetime without a time zone reached a rule that needs an instant."""


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


class InvalidPeriodIndex(DomainError, ValueError):
    """A period or boundary index below zero."""


class InvalidAttemptCount(DomainError, ValueError):
    """A failed-attempt count that cannot occur (dunning counts failures from 1)."""


class InvalidPolicy(DomainError, ValueError):
    """A dunning policy with negative delays, jitter or retry interval."""
