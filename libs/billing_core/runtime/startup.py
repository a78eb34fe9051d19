"""Fail fast at start: a worker whose database does not answer exits with a clear message.

Once running, a worker rides out outages (its loop backs off and retries); at start, a database
that never answers is a configuration problem, and the operator should hear about it at once.
"""

from __future__ import annotations

import asyncio
import sys
import time
import warnings
from typing import TypeVar

from pydantic import ValidationError
from sqlalchemy.engine import make_url

from billing_core.db import pg
from billing_core.settings import CoreSettings, RenamedSetting

S = TypeVar("S", bound=CoreSettings)

EXIT_INVALID_SETTINGS = 2
EXIT_UNREACHABLE = 3


async def _database_answers(settings: CoreSettings) -> None:
    pool = await pg.create_pool(settings, max_size=1)
    try:
        await pg.database_answers(pool)
    finally:
        await pool.close()


def require_database(process: str, settings: CoreSettings) -> None:
    """Return once PostgreSQL answers; exit 3 after ``BILLING_STARTUP_TIMEOUT_SECONDS``."""
    deadline = time.monotonic() + settings.startup_timeout_seconds
    while True:
        try:
            asyncio.run(_database_answers(settings))
            return
        except Exception as exc:
            if time.monotonic() >= deadline:
                where = make_url(settings.database_url).render_as_string(hide_password=True)
                print(
                    f"{process}: PostgreSQL at {where} did not answer within "
                    f"{settings.startup_timeout_seconds:g} s ({type(exc).__name__}: {exc}); "
                    "check BILLING_DATABASE_URL and that the database is up",
                    file=sys.stderr,
                )
                raise SystemExit(EXIT_UNREACHABLE) from None
            time.sleep(1)


def load_settings(cls: type[S], process: str) -> S:
    """Build the process's settings once; an invalid one exits 2 naming the setting. A renamed
    setting still set under its old name is read, and said on stderr."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", RenamedSetting)
        try:
            settings = cls()
        except ValidationError as exc:
            print(f"{process}: invalid settings\n{exc}", file=sys.stderr)
            raise SystemExit(EXIT_INVALID_SETTINGS) from None
    for warning in seen:
        print(f"{process}: {warning.message}", file=sys.stderr)
    return settings
