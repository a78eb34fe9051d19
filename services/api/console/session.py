"""Console sessions: an operator logs in once with an API key; the browser then holds a signed,
expiring cookie naming the session and its client (never the key). Forms carry a token bound to
a cookie of the browser (the session's; before login, the login form's), so another site cannot
post on the operator's behalf (the cookies are also SameSite=Strict).

A session is open while its id is in Redis: every API replica reads the same keys, logging out
deletes one, and each expires with its session, so nothing needs purging. Losing Redis's data
ends every session (fail closed), never revives one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass

import redis.asyncio as aioredis

COOKIE = "billing_console"
LOGIN_COOKIE = "billing_console_login"
KEY_PREFIX = "billing:console:session:"


class SessionsUnavailable(Exception):
    """Redis did not answer: no session can be opened, checked or closed."""


@dataclass(frozen=True)
class Operator:
    session_id: str
    client_id: int
    name: str
    expires_at: float  # epoch seconds


class Sessions:
    def __init__(self, secret: bytes | None, lifetime_seconds: int) -> None:
        # Without a configured secret, sessions last as long as this process (one replica).
        self._secret = secret or secrets.token_bytes(32)
        self._lifetime = lifetime_seconds

    def _sign(self, body: bytes) -> str:
        return hmac.new(self._secret, body, hashlib.sha256).hexdigest()

    async def open(self, redis: aioredis.Redis, client_id: int, name: str, now: float) -> str:
        """A new session of the client: its cookie."""
        session_id = secrets.token_urlsafe(18)
        try:
            await redis.set(KEY_PREFIX + session_id, client_id, ex=self._lifetime)
        except (aioredis.RedisError, OSError) as exc:
            raise SessionsUnavailable from exc
        body = json.dumps(
            {"s": session_id, "c": client_id, "n": name, "e": now + self._lifetime},
            separators=(",", ":"),
        ).encode()
        return base64.urlsafe_b64encode(body).decode() + "." + self._sign(body)

    async def read(self, redis: aioredis.Redis, cookie: str | None, now: float) -> Operator | None:
        """The operator of a signed, unexpired cookie whose session is still open."""
        operator = self._signed(cookie, now)
        if operator is None:
            return None
        try:
            is_open = await redis.exists(KEY_PREFIX + operator.session_id)
        except (aioredis.RedisError, OSError) as exc:
            raise SessionsUnavailable from exc
        return operator if is_open else None

    async def close(self, redis: aioredis.Redis, cookie: str | None, now: float) -> None:
        operator = self._signed(cookie, now)
        if operator is None:
            return
        try:
            await redis.delete(KEY_PREFIX + operator.session_id)
        except (aioredis.RedisError, OSError) as exc:
            raise SessionsUnavailable from exc

    def _signed(self, cookie: str | None, now: float) -> Operator | None:
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
            operator = Operator(str(data["s"]), int(data["c"]), str(data["n"]), float(data["e"]))
        except (ValueError, KeyError, TypeError):
            return None
        return operator if operator.expires_at > now else None

    def form_token(self, cookie: str) -> str:
        """The token a console form carries: bound to this cookie of the browser."""
        return self._sign(b"form:" + cookie.encode())

    def form_token_ok(self, cookie: str | None, token: str | None) -> bool:
        return bool(cookie and token) and _same(self.form_token(cookie or ""), token or "")


def login_nonce() -> str:
    """The login form's cookie: what its token is bound to before there is a session."""
    return secrets.token_urlsafe(18)


def _same(expected: str, given: str) -> bool:
    """``given`` is the hex digest ``expected``, compared in constant time as bytes (whatever
    characters a browser sent)."""
    return given.isascii() and hmac.compare_digest(expected.encode(), given.encode())
