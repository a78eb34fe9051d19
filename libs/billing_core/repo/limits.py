"""The one check every claim makes on its batch size before any SQL is sent."""

from __future__ import annotations


def require_positive_limit(limit: int) -> None:
    """A claim of zero or fewer rows is a caller's bug: said here, not by PostgreSQL."""
    if limit < 1:
        raise ValueError(f"a claim takes at least one row, not {limit}")
