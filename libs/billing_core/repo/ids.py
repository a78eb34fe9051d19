"""Ids drawn ahead from sequences, for rows inserted later by a statement that needs them.

Sequence values are unique and never reused, and a drawn value that ends up unused only leaves a
gap (as a rolled-back insert does). A value drawn ahead is still drawn before its row exists, so
rows of one subscription keep ids in the order they were created.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from billing_core.db import pg
from billing_core.db.pg import Connection, Statement

_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


def _statement(sequences: Sequence[str]) -> Statement:
    if not sequences or not all(_NAME.match(name) for name in sequences):
        raise ValueError(f"not sequence names: {sequences!r}")
    columns = ", ".join(f"nextval('{name}') AS {name}" for name in sequences)
    return Statement(f"SELECT {columns} FROM generate_series(1, CAST(:count AS int))")


_STATEMENTS: dict[tuple[str, ...], Statement] = {}


async def draw(conn: Connection, sequences: Sequence[str], count: int) -> list[tuple[int, ...]]:
    """``count`` rows of the next value of each of ``sequences``, in one statement."""
    if count < 1:
        raise ValueError(f"count must be positive, not {count}")
    names = tuple(sequences)
    statement = _STATEMENTS.get(names)
    if statement is None:
        statement = _STATEMENTS[names] = _statement(names)
    rows = await pg.fetch(conn, statement, {"count": count})
    return [tuple(int(row[name]) for name in names) for row in rows]
