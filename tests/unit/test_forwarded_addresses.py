"""Which proxies' X-Forwarded-For the API believes: only listed addresses or ranges, never any
peer's (a client could then choose the address its unknown keys are counted against)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from services.api.settings import ApiSettings


@pytest.mark.parametrize("value", ["*", "10.0.0.0/8,*", "ingress-nginx", "10.0.0.1/8"])
def test_anything_but_addresses_and_ranges_is_refused(value: str) -> None:
    with pytest.raises(ValidationError, match="api_forwarded_allow_ips"):
        ApiSettings(api_forwarded_allow_ips=value)


@pytest.mark.parametrize("value", ["127.0.0.1", "10.0.0.0/8, fd00::/8", ""])
def test_addresses_and_ranges_are_accepted(value: str) -> None:
    assert ApiSettings(api_forwarded_allow_ips=value).api_forwarded_allow_ips == value


async def client_seen(trusted: str, peer: str, forwarded_for: str) -> str:
    """The client address the app sees behind uvicorn's proxy headers, given ``trusted``."""
    seen: list[str] = []

    async def app(scope: Any, _receive: Any, _send: Any) -> None:
        seen.append(scope["client"][0])

    middleware = ProxyHeadersMiddleware(app, trusted_hosts=trusted)
    scope = {
        "type": "http",
        "client": (peer, 40000),
        "headers": [(b"x-forwarded-for", forwarded_for.encode())],
    }
    await middleware(scope, None, None)  # type: ignore[arg-type]
    return seen[0]


async def test_a_client_behind_the_trusted_ingress_cannot_choose_its_address() -> None:
    trusted = ApiSettings(api_forwarded_allow_ips="10.0.0.0/8").api_forwarded_allow_ips
    # The client wrote its own X-Forwarded-For; the ingress (10.2.0.7) appended the real one.
    assert await client_seen(trusted, "10.2.0.7", "192.0.2.1, 203.0.113.5") == "203.0.113.5"
    assert await client_seen(trusted, "203.0.113.5", "192.0.2.1") == "203.0.113.5"
