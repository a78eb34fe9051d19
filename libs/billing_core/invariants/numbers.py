"""Document numbers (``billing_core.domain.numbering``): each series is 1..its counter, once.

* ``number_gap``: a series whose counter says ``n`` numbers were given, but whose documents do
  not carry exactly the numbers 1..n (one missing, one beyond the counter, or one repeated).
* ``misnumbered``: a number that is not of its document's series (kind and year).

Documents not numbered yet are not violations (the renewer's numbering pass gives them theirs);
the check's notes count them.
"""

from __future__ import annotations

from billing_core.db.arrays import int_array, text_array
from billing_core.db.pg import Connection, Statement, fetch, fetchval
from billing_core.domain.numbering import DIGITS, DocumentKind, number_prefix, series
from billing_core.invariants.report import Check

# Every numbered document with its kind and year of issue (UTC): the two halves of its series.
_DATED = """
    dated AS (
        SELECT kind, id, number, issued_at,
               CAST(extract(year FROM issued_at AT TIME ZONE 'UTC') AS int) AS year
        FROM (
            SELECT 'INVOICE' AS kind, id, number, created_at AS issued_at FROM invoice
            WHERE number IS NOT NULL
            UNION ALL
            SELECT 'CREDIT_NOTE', id, credit_note_number, coalesce(completed_at, updated_at)
            FROM refund WHERE credit_note_number IS NOT NULL
        ) d
    )
"""

# One document of each kind and year: the domain names its series.
_SERIES_SEEN = Statement(
    f"WITH {_DATED} SELECT kind, year, min(issued_at) AS issued_at FROM dated GROUP BY kind, year"
)

# The printed number ``n`` of a series, as ``billing_core.domain.numbering.format_number``.
_FORMATTED = (
    "{prefix} || lpad(CAST({n} AS text), greatest(:digits, length(CAST({n} AS text))), '0')"
)

# Each document against its series (names, prefixes and counters as the domain gives them):
# whether it carries the series' prefix, and the counter value its number is, if it is one.
_JUDGED = (
    "WITH"
    + _DATED
    + """,
    s AS (
        SELECT * FROM unnest(
            CAST(:kinds AS text)::text[], CAST(:years AS text)::int[],
            CAST(:names AS text)::text[], CAST(:prefixes AS text)::text[],
            CAST(:lasts AS text)::bigint[]) AS s(kind, year, name, prefix, last)
    ),
    judged AS (
        SELECT s.name, s.last, d.kind, d.id, d.number, starts_with(d.number, s.prefix) AS ours,
               g.n, g.n BETWEEN 1 AND s.last AND d.number = """
    + _FORMATTED.format(prefix="s.prefix", n="g.n")
    + """ AS counted
        FROM dated d JOIN s ON s.kind = d.kind AND s.year = d.year
        CROSS JOIN LATERAL (
            SELECT CASE WHEN substr(d.number, length(s.prefix) + 1) ~ '^[0-9]{1,18}$'
                        THEN CAST(substr(d.number, length(s.prefix) + 1) AS bigint) END AS n
        ) g
    )
    """
)

_MISNUMBERED = Statement(
    _JUDGED + "SELECT kind, id, number, name FROM judged WHERE NOT ours ORDER BY kind, id"
)

# The multiset of a series' numbers is 1..last exactly when it holds ``last`` documents whose
# distinct numbers are ``last`` of the series' own.
_SERIES = Statement(
    _JUDGED
    + """
    SELECT name, count(*) AS numbered, count(DISTINCT n) FILTER (WHERE counted) AS counted
    FROM judged GROUP BY name
    """
)

_MISSING = Statement(
    _JUDGED
    + "SELECT "
    + _FORMATTED.format(prefix="CAST(:prefix AS text)", n="m.n")
    + """ AS number
    FROM generate_series(1, CAST(:last AS bigint)) AS m(n)
    WHERE NOT EXISTS (SELECT 1 FROM judged j WHERE j.name = :name AND j.counted AND j.n = m.n)
    ORDER BY m.n
    LIMIT 5
    """
)

_COUNTERS = Statement("SELECT series, last_number FROM document_series")
_UNNUMBERED = Statement(
    "SELECT (SELECT count(*) FROM invoice WHERE number IS NULL) + "
    "(SELECT count(*) FROM refund WHERE status = 'SUCCEEDED' AND credit_note_number IS NULL)"
)


async def check_numbers(conn: Connection) -> Check:
    check = Check("numbers", "each document series numbered 1..n, no gap, no repeat")
    counters = {r["series"]: int(r["last_number"]) for r in await fetch(conn, _COUNTERS)}
    seen = [
        (r["kind"], r["year"], series(DocumentKind(r["kind"]), r["issued_at"]))
        for r in await fetch(conn, _SERIES_SEEN)
    ]
    params: dict[str, object] = {
        "kinds": text_array(kind for kind, _, _ in seen),
        "years": int_array(year for _, year, _ in seen),
        "names": text_array(name for _, _, name in seen),
        "prefixes": text_array(number_prefix(name) for _, _, name in seen),
        "lasts": int_array(counters.get(name, 0) for _, _, name in seen),
        "digits": DIGITS,
    }
    for r in await fetch(conn, _MISNUMBERED, params):
        subject = "invoice" if r["kind"] == DocumentKind.INVOICE else "refund"
        check.add(
            "misnumbered", subject, r["id"], f"number {r['number']} is not of series {r['name']}"
        )
    given = {
        r["name"]: (int(r["numbered"]), int(r["counted"]))
        for r in await fetch(conn, _SERIES, params)
    }
    check.checked = sum(numbered for numbered, _ in given.values())
    for name in sorted(given.keys() | counters.keys()):
        last = counters.get(name, 0)
        numbered, counted = given.get(name, (0, 0))
        if numbered == last == counted:
            continue
        missing = [
            r["number"]
            for r in await fetch(
                conn,
                _MISSING,
                {**params, "name": name, "prefix": number_prefix(name), "last": last},
            )
        ]
        check.add(
            "number_gap",
            "series",
            name,
            f"counter at {last}, {numbered} documents numbered, "
            f"{last - counted} numbers missing {missing}",
        )
    unnumbered = int(await fetchval(conn, _UNNUMBERED))
    if unnumbered:
        check.notes.append(f"{unnumbered} documents not numbered yet")
    return check
