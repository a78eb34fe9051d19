"""Webhook signatures: ``Billing-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>...]``, and
Stripe's ``Stripe-Signature``, which is the same scheme (its other entries, such as ``v0``,
are ignored).

``v1`` is HMAC-SHA256(secret, "<t>.<raw body>") in hex. Several ``v1`` entries and several
configured secrets may be present (rotation): the signature is valid when any entry matches any
secret. Signatures older (or further in the future) than the tolerance are rejected, so a
captured request cannot be replayed later. Comparison is constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime


class SignatureError(Exception):
    """The webhook is unsigned, mis-signed or too old; the reason is for logs only."""


@dataclass(frozen=True)
class ParsedSignature:
    timestamp: int
    signatures: tuple[str, ...]


def parse_header(header: str | None) -> ParsedSignature:
    if not header:
        raise SignatureError("missing signature header")
    timestamp: int | None = None
    signatures: list[str] = []
    for part in header.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            continue
        if key == "t":
            if not value.isdigit() or len(value) > 12:
                raise SignatureError("malformed timestamp")
            timestamp = int(value)
        elif key == "v1" and value:
            signatures.append(value.strip().lower())
    if timestamp is None:
        raise SignatureError("no timestamp")
    if not signatures:
        raise SignatureError("no v1 signature")
    return ParsedSignature(timestamp, tuple(signatures))


def compute(secret: bytes, timestamp: int, body: bytes) -> str:
    return hmac.new(secret, str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()


def sign_header(secret: bytes, timestamp: int, body: bytes) -> str:
    """The header a gateway would send (used by tests and the simulator's peers)."""
    return f"t={timestamp},v1={compute(secret, timestamp, body)}"


def verify(
    header: str | None,
    body: bytes,
    *,
    secrets: Sequence[bytes],
    now: datetime,
    tolerance_seconds: int,
) -> int:
    """Return the signed timestamp, or raise :class:`SignatureError`."""
    if not secrets:
        raise SignatureError("no webhook secret configured")
    parsed = parse_header(header)
    if abs(now.timestamp() - parsed.timestamp) > tolerance_seconds:
        raise SignatureError("timestamp outside the tolerance")
    matched = False
    for secret in secrets:
        expected = compute(secret, parsed.timestamp, body).encode()
        for candidate in parsed.signatures:
            # Evaluate every pair: no early exit that would leak which one matched.
            matched |= hmac.compare_digest(expected, candidate.encode())
    if not matched:
        raise SignatureError("no signature matches")
    return parsed.timestamp
