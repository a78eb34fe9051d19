"""The array literals the batch statements send read back in PostgreSQL as the values sent."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.db.arrays import (
    bool_array,
    instant_array,
    instant_sql,
    json_array,
    json_elements_sql,
    nullable_int_array,
    text_array,
)


async def test_strings_of_any_characters_and_nulls_come_back_as_sent(engine: AsyncEngine) -> None:
    sent = ['a "quoted" word', "back\\slash", "{braces,comma}", "NULL", None, "", " lead"]
    sent += ["new\nline\ttab", "é ü 漢字 🙂", '\\"', "trailing\\"]
    async with engine.connect() as conn:
        got = (
            await conn.execute(text("SELECT CAST(:a AS text)::text[]"), {"a": text_array(sent)})
        ).scalar_one()
    assert got == sent


async def test_instants_come_back_to_the_microsecond(engine: AsyncEngine) -> None:
    rng = random.Random(7)
    low = datetime(1900, 1, 1, tzinfo=UTC)
    span = int((datetime(2250, 1, 1, tzinfo=UTC) - low) / timedelta(microseconds=1))
    sent: list[datetime | None] = [
        low + timedelta(microseconds=rng.randrange(span)) for _ in range(2000)
    ]
    sent += [None, datetime(1970, 1, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)]
    async with engine.connect() as conn:
        got = (
            await conn.execute(
                text(
                    f"SELECT array_agg({instant_sql('u')} ORDER BY n) FROM unnest("
                    "CAST(:a AS text)::bigint[]) WITH ORDINALITY AS x(u, n)"
                ),
                {"a": instant_array(sent)},
            )
        ).scalar_one()
    assert got == sent


async def test_json_documents_come_back_in_order(engine: AsyncEngine) -> None:
    docs = [json.dumps({"n": i, "s": 'quote " and \\ back'}) for i in range(500)]
    async with engine.connect() as conn:
        got = (
            await conn.execute(
                text(f"SELECT {json_elements_sql(':docs')}"), {"docs": json_array(docs)}
            )
        ).scalar_one()
    assert got == [json.loads(d) for d in docs]


async def test_booleans_and_nullable_integers_come_back_as_sent(engine: AsyncEngine) -> None:
    bools = [True, False, None, True]
    ints = [None, -9_223_372_036_854_775_808, 0, 42]
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                text("SELECT CAST(:b AS text)::boolean[], CAST(:i AS text)::bigint[]"),
                {"b": bool_array(bools), "i": nullable_int_array(ints)},
            )
        ).one()
    assert list(row) == [bools, ints]
