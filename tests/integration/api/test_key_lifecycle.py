"""Key lifecycle: expiry, revocation and rotation take effect within the auth cache time; the
``billing api-keys`` command and the admin routes manage keys, each change audited."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.domain.scopes import Scope
from billing_core.settings import CoreSettings
from services.api.admin import create_api_key_async, revoke_key, rotate_key
from services.api.app import create_app
from services.api.settings import ApiSettings
from tests.integration.api.conftest import ROOT, asgi_client
from tests.integration.api.helpers import assert_problem, rows

CACHE_SECONDS = 1.0


@pytest.fixture
async def cached_app(
    api_settings: ApiSettings, clock: ManualClock, engine: AsyncEngine
) -> AsyncIterator[FastAPI]:
    """The API with verified keys cached for CACHE_SECONDS (production default: 10 s)."""
    application = create_app(
        api_settings.model_copy(update={"auth_cache_seconds": CACHE_SECONDS}), clock
    )
    async with application.router.lifespan_context(application):
        yield application


async def test_an_expired_key_fails_at_once_even_when_cached(
    cached_app: FastAPI, settings: CoreSettings, clock: ManualClock
) -> None:
    clock.set(datetime.now(UTC))  # the key is made on the real clock
    key = await create_api_key_async(settings, "short", expires_in=timedelta(hours=1))
    async with asgi_client(cached_app, key) as c:
        assert (await c.get("/plans")).status_code == 200  # now cached
        clock.advance(timedelta(minutes=59))
        assert (await c.get("/plans")).status_code == 200
        clock.advance(timedelta(minutes=1, seconds=30))  # the key was made just after set()
        assert_problem(await c.get("/plans"), 401, "unauthorized")


async def test_a_revoked_key_fails_within_the_cache_time(
    cached_app: FastAPI, settings: CoreSettings
) -> None:
    key = await create_api_key_async(settings, "leaked")
    async with asgi_client(cached_app, key) as c:
        assert (await c.get("/plans")).status_code == 200
        await asyncio.to_thread(revoke_key, settings, key[:11])
        # Another replica (this process's cache was not told) may still accept it, at most
        # until its cache entry ends.
        await asyncio.sleep(CACHE_SECONDS + 0.1)
        assert_problem(await c.get("/plans"), 401, "unauthorized")


async def test_rotation_keeps_the_old_key_for_the_grace_period(
    cached_app: FastAPI, settings: CoreSettings, clock: ManualClock, engine: AsyncEngine
) -> None:
    old_key = await create_api_key_async(
        settings, "partner", scopes=[Scope.PLANS_READ], rate_limit_per_minute=500
    )
    # The command line runs on the real clock; the API here on the manual one, which is
    # behind it: give the grace period in those terms.
    old, new = await asyncio.to_thread(
        rotate_key, settings, old_key[:11], grace=timedelta(hours=2), expires_in=None
    )
    assert new.info.name == "partner"
    assert new.info.scopes == (Scope.PLANS_READ,)
    assert new.info.rate_limit_per_minute == 500
    assert new.info.rotated_from_id == old.id
    assert old.expires_at is not None
    clock.set(old.expires_at - timedelta(minutes=1))
    async with (
        asgi_client(cached_app, old_key) as before,
        asgi_client(cached_app, new.key) as after,
    ):
        assert (await before.get("/plans")).status_code == 200
        assert (await after.get("/plans")).status_code == 200
        clock.set(old.expires_at)
        assert_problem(await before.get("/plans"), 401, "unauthorized")
        assert (await after.get("/plans")).status_code == 200
    actions = await rows(engine, "SELECT action, source, client_id FROM audit_event ORDER BY id")
    assert [(a["action"], a["source"], a["client_id"]) for a in actions] == [
        ("api_key.create", "CLI", None),
        ("api_key.rotate", "CLI", None),  # one row for the change: new key and shortened old
    ]


def _billing(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", "api-keys", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_command_creates_lists_rotates_and_revokes(database_url: str) -> None:
    created = _billing(
        "create", "reporting", "--scope", "subscriptions:read,invoices:read", "--expires-in", "90d"
    )
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    assert key.startswith("bk_")
    prefix = key[:11]

    listed = _billing("list")
    assert listed.returncode == 0, listed.stderr
    (line,) = [line for line in listed.stdout.splitlines() if line.startswith(prefix)]
    assert "reporting" in line
    assert "subscriptions:read,invoices:read" in line
    assert " active " in line
    assert key not in listed.stdout

    rotated = _billing("rotate", prefix, "--grace", "1h")
    assert rotated.returncode == 0, rotated.stderr
    new_prefix = rotated.stdout.strip()[:11]
    assert new_prefix != prefix

    revoked = _billing("revoke", prefix)
    assert revoked.returncode == 0, revoked.stderr
    after = _billing("list", "--all").stdout
    (old_line,) = [line for line in after.splitlines() if line.startswith(prefix)]
    assert " revoked " in old_line
    assert any(line.startswith(new_prefix) and " active " in line for line in after.splitlines())

    bad = _billing("create", "oops", "--scope", "subscriptions:delete")
    assert bad.returncode == 2
    assert "unknown scope 'subscriptions:delete'" in bad.stderr
    assert _billing("revoke", "bk_nosuchkey").returncode == 2


async def test_admin_keys_manage_keys_over_the_api(
    app: FastAPI, client: httpx.AsyncClient, settings: CoreSettings, engine: AsyncEngine
) -> None:
    created = await client.post(
        "/api-keys",
        json={"name": "ci", "scopes": ["plans:read"], "expiresInSeconds": 3600},
    )
    assert created.status_code == 201, created.text
    body = created.json()
    new_key, prefix = body["key"], body["apiKey"]["prefix"]
    assert body["apiKey"]["scopes"] == ["plans:read"]
    assert body["apiKey"]["status"] == "active"
    async with asgi_client(app, new_key) as ci:
        assert (await ci.get("/plans")).status_code == 200
        assert_problem(await ci.get("/api-keys"), 403, "forbidden")

    listed = (await client.get("/api-keys")).json()["items"]
    (ci_key,) = [k for k in listed if k["prefix"] == prefix]
    assert ci_key["lastUsedAt"] is not None  # noted by the look-up that verified it
    assert new_key not in str(listed)

    rotated = await client.post(f"/api-keys/{prefix}/rotate", json={"graceSeconds": 0})
    assert rotated.status_code == 201, rotated.text
    assert rotated.json()["previous"]["status"] == "expired"
    async with asgi_client(app, new_key) as ci:
        assert_problem(await ci.get("/plans"), 401, "unauthorized")
    next_prefix = rotated.json()["apiKey"]["prefix"]
    revoked = await client.post(f"/api-keys/{next_prefix}/revoke")
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["status"] == "revoked"
    assert_problem(await client.post("/api-keys/bk_nosuchkey/revoke"), 404, "api-key-not-found")

    audit = await rows(
        engine,
        "SELECT action, source, client_id, request_id FROM audit_event ORDER BY id",
    )
    (admin_id,) = [
        r["id"] for r in await rows(engine, "SELECT id FROM api_client WHERE name = 'tests'")
    ]
    assert [a["action"] for a in audit] == [
        "api_key.create",  # the fixture's own key (CLI)
        "api_key.create",
        "api_key.rotate",
        "api_key.revoke",
    ]
    assert all((a["source"], a["client_id"]) == ("API", admin_id) for a in audit[1:])
    assert all(a["request_id"] for a in audit[1:])


async def test_an_admin_key_grants_only_the_scopes_it_holds(
    app: FastAPI, settings: CoreSettings, engine: AsyncEngine
) -> None:
    """``admin`` is key management, not every scope: an admin key can neither create a key
    with a scope it lacks nor rotate one (which would hand it that key)."""
    admin = await create_api_key_async(settings, "keys-only", scopes=[Scope.ADMIN])
    full = await create_api_key_async(settings, "full")
    async with asgi_client(app, admin) as c:
        wider = await c.post(
            "/api-keys", json={"name": "reader", "scopes": ["admin", "subscriptions:read"]}
        )
        body = assert_problem(wider, 403, "forbidden")
        assert "subscriptions:read" in body["detail"]
        assert "admin" not in body["detail"].split("lacks", 1)[1]
        rotated = await c.post(f"/api-keys/{full[:11]}/rotate", json={"graceSeconds": 0})
        assert_problem(rotated, 403, "forbidden")
        own = await c.post("/api-keys", json={"name": "keys-too", "scopes": ["admin"]})
        assert own.status_code == 201, own.text
    names = [r["name"] for r in await rows(engine, "SELECT name FROM api_client ORDER BY id")]
    assert names.count("reader") == 0
    assert names.count("full") == 1  # not rotated
    assert await rows(engine, "SELECT 1 FROM api_client WHERE expires_at IS NOT NULL") == []
    async with asgi_client(app, full) as c:
        assert (await c.get("/plans")).status_code == 200
        made = await c.post("/api-keys", json={"name": "reader", "scopes": ["subscriptions:read"]})
        assert made.status_code == 201, made.text
