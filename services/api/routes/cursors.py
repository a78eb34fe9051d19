"""Opaque page cursors: ``base64url("<kind>:<id>")`` of the last item of a page, newest-first
listings continuing below that id (stable while rows are added)."""

from __future__ import annotations

import base64
import binascii

from billing_core.domain.money import BIGINT_MAX
from services.api.problems import ApiProblem, ProblemKind

INVALID_CURSOR = ProblemKind(400, "invalid-cursor", "Invalid cursor")


def encode(kind: str, last_id: int) -> str:
    return base64.urlsafe_b64encode(f"{kind}:{last_id}".encode()).decode().rstrip("=")


def decode(kind: str, cursor: str | None) -> int | None:
    """The id a ``kind`` cursor continues below; None without a cursor; 400 invalid-cursor for
    anything that is not one of ours (another listing's cursor included)."""
    if cursor is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        prefix, _, value = raw.partition(":")
        last_id = int(value)
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise ApiProblem(INVALID_CURSOR, "Use the nextCursor of a previous page.") from exc
    if prefix != kind or not 1 <= last_id <= BIGINT_MAX:
        raise ApiProblem(INVALID_CURSOR, "Use the nextCursor of a previous page.")
    return last_id


def next_cursor(kind: str, ids: list[int], limit: int) -> str | None:
    """The cursor after a page read with ``limit + 1`` rows (``ids``): None on the last page."""
    return encode(kind, ids[limit - 1]) if len(ids) > limit else None
