"""Customer credit (from downgrades) consumed by later invoices: never lost, never used twice."""

from __future__ import annotations

from billing_core.domain.errors import InvalidAmount
from billing_core.domain.values import value_object


@value_object
class CreditSplit:
    amount_due: int
    credit_used: int
    credit_remaining: int


def apply_credit(amount: int, credit_balance: int) -> CreditSplit:
    if amount < 0 or credit_balance < 0:
        raise InvalidAmount("amount and credit balance must not be negative")
    used = min(amount, credit_balance)
    return CreditSplit(
        amount_due=amount - used, credit_used=used, credit_remaining=credit_balance - used
    )


def credit_from_proration(due: int) -> int:
    """The credit a proration grants: ``-due`` for a downgrade, else nothing."""
    return -due if due < 0 else 0
