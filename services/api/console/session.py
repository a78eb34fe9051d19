"""Console sessions: an operator logs in once with an API key; the browser then holds a signed,
expiring cookie naming the client (never the key). Forms carry a token derived from the cookie,
so another site cannot post on the operator's behalf (the cookie is also SameSite=Strict)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass

COOKIE = "billing_console"


@dataclass(frozen=True)
class Operator:
    client_id: int
    name: str
    expires_at: float  # epoch seconds


class Sessions:
    def __init__(self, secret: bytes | None, lifetime_seconds: float) -> None:
        # Without a configured secret, sessions last as long as this process (one replica).
        self._secret = secret or secrets.token_bytes(32)
        self._lifetime = lifetime_seconds

    def _sign(self, body: bytes) -> str:
        return hmac.new(self._secret, body, hashlib.sha256).hexdigest()

    def issue(self, client_id: int, name: str, now: float) -> str:
        body = json.dumps(
            {"c": client_id, "n": name, "e": now + self._lifetime}, separators=(",", ":")
        ).encode()
        return base64.urlsafe_b64encode(body).decode() + "." + self._sign(body)

    def read(self, cookie: str | None, now: float) -> Operator | None:
        if not cookie or "." not in cookie or len(cookie) > 2000:
            return None
        encoded, signature = cookie.rsplit(".", 1)
        try:
            body = base64.urlsafe_b64decode(encoded.encode())
        except (ValueError, TypeError):
            return None
        if not _same(self._sign(body), signature):
            return None
        try:
            data = json.loads(body)
            operator = Operator(int(data["c"]), str(data["n"]), float(data["e"]))
        except (ValueError, KeyError, TypeError):
            return None
        return operator if operator.expires_at > now else None

    def form_token(self, cookie: str) -> str:
        """The token every console form carries: bound to this session's cookie."""
        return self._sign(b"form:" + cookie.encode())

    def form_token_ok(self, cookie: str | None, token: str | None) -> bool:
        return bool(cookie and token) and _same(self.form_token(cookie or ""), token or "")


def _same(expected: str, given: str) -> bool:
    """``given`` is the hex digest ``expected``, compared in constant time as bytes (whatever
    characters a browser sent)."""
    return given.isascii() and hmac.compare_digest(expected.encode(), given.encode())
