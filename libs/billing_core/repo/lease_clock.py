"""The one clock leases are taken and compared on: the database's.

Every replica's claims read "now" in the statement itself (``statement_timestamp()``, moved by
the deployment's shared ``BILLING_CLOCK_OFFSET_SECONDS``), so a replica whose host clock is skewed
can neither take a lease still running nor write one that ends early. Tests pass an instant.
"""

from __future__ import annotations

from datetime import datetime, timedelta

# A CTE named ``clock`` with one column ``now``: ``:now`` when given, else the database's clock.
CLOCK_CTE = """clock AS (
        SELECT coalesce(
            CAST(:now AS timestamptz),
            statement_timestamp() + make_interval(secs => CAST(:offset_s AS double precision))
        ) AS now
    )"""


def clock_params(now: datetime | None, offset: timedelta) -> dict[str, object]:
    """The parameters :data:`CLOCK_CTE` reads."""
    return {"now": now, "offset_s": offset.total_seconds()}
