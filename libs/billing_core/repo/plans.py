"""The plan catalogue (read-only for the processes; migrations seed it)."""

from __future__ import annotations

from dataclasses import dataclass

from billing_core.db.pg import Connection, Statement, fetch, fetchrow
from billing_core.domain.errors import DomainError


class PlanNotFound(DomainError):
    def __init__(self, code: str) -> None:
        super().__init__(f"unknown plan {code!r}")
        self.code = code


@dataclass(frozen=True)
class Plan:
    id: int
    code: str
    name: str
    price_amount: int
    currency: str
    billing_interval: str
    active: bool
    # Days of free trial a new subscription gets (0: none) unless it asks otherwise.
    trial_days: int = 0


_COLUMNS = "id, code, name, price_amount, currency, billing_interval, active, trial_days"

_ACTIVE = Statement(f"SELECT {_COLUMNS} FROM plan WHERE active ORDER BY id")

_BY_CODE = Statement(
    f"""
    SELECT {_COLUMNS} FROM plan
    WHERE code = :code AND (active OR NOT CAST(:active_only AS boolean))
    """
)


async def list_active(conn: Connection) -> list[Plan]:
    return [Plan(**row) for row in await fetch(conn, _ACTIVE)]


async def get_by_code(conn: Connection, code: str, *, active_only: bool = True) -> Plan:
    row = await fetchrow(conn, _BY_CODE, {"code": code, "active_only": active_only})
    if row is None:
        raise PlanNotFound(code)
    return Plan(**row)
