"""Array parameters sent to PostgreSQL as one text value each.

asyncpg encodes a list parameter element by element, first testing each element against the
container ABCs (is it a nested array?), and a timestamp through several datetime operations:
about a quarter of a microsecond per integer, half a microsecond per string and over a
microsecond per timestamp, in Python. The batch statements send tens of values per row. As one
text value, PostgreSQL's array (or JSON) input parses them in C, and the statement casts it:

* integers: ``{1,2,3}`` — ``CAST(:ids AS text)::bigint[]``;
* strings: each one double-quoted with ``\\`` and ``"`` escaped — ``CAST(:s AS text)::text[]``;
* booleans: ``{t,f}`` — ``CAST(:b AS text)::boolean[]``;
* instants: integer microseconds since the Unix epoch, turned back into ``timestamptz`` by
  :func:`instant_sql` (exact: integers below 2**53 are exact in the ``float8`` the interval
  is multiplied by, and that is the year 2255);
* JSON documents: one JSON array of them — :func:`json_elements_sql`.

``None`` is ``NULL`` in every kind that allows it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def int_array(values: Iterable[int]) -> str:
    """``values`` as a PostgreSQL array literal of integers (no NULLs)."""
    return "{" + ",".join(map(str, values)) + "}"


def nullable_int_array(values: Iterable[int | None]) -> str:
    """``values`` as an array literal of integers, ``None`` as NULL."""
    return "{" + ",".join(["NULL" if v is None else str(v) for v in values]) + "}"


def text_array(values: Iterable[str | None]) -> str:
    """``values`` as an array literal of strings (any characters), ``None`` as NULL. A batch's
    strings repeat (statuses, kinds, event types, line descriptions): each distinct one is
    quoted once."""
    values = list(values)
    quoted = {
        v: "NULL" if v is None else '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        for v in set(values)
    }
    return "{" + ",".join(map(quoted.__getitem__, values)) + "}"


def bool_array(values: Iterable[bool | None]) -> str:
    """``values`` as an array literal of booleans, ``None`` as NULL."""
    return "{" + ",".join(["NULL" if v is None else "t" if v else "f" for v in values]) + "}"


def instant_array(values: Iterable[datetime | None]) -> str:
    """Aware datetimes as an array literal of microseconds since the Unix epoch (read them with
    :func:`instant_sql`), ``None`` as NULL; a naive datetime raises ``TypeError``."""
    return (
        "{"
        + ",".join(["NULL" if v is None else str((v - _EPOCH) // _MICROSECOND) for v in values])
        + "}"
    )


def instant_sql(microseconds: str) -> str:
    """The SQL expression of the ``timestamptz`` that the SQL expression ``microseconds`` (an
    element of an :func:`instant_array`) counts from the Unix epoch."""
    return f"(timestamptz 'epoch' + {microseconds} * interval '1 microsecond')"


def json_array(documents: Iterable[str]) -> str:
    """JSON documents (each valid JSON text) as one JSON array (read it with
    :func:`json_elements_sql`)."""
    return "[" + ",".join(documents) + "]"


def json_elements_sql(placeholder: str) -> str:
    """The SQL expression of the ``jsonb[]`` of a :func:`json_array` parameter (its placeholder,
    ``:name`` or ``$n``), in order."""
    return (
        f"ARRAY(SELECT d FROM jsonb_array_elements(CAST({placeholder} AS jsonb)) "
        "WITH ORDINALITY AS j(d, n) ORDER BY n)"
    )
