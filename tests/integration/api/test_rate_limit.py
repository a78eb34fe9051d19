"""Per-client rate limit (Redis), unknown keys limited per address and cached as unknown, and
what the API does when Redis is down."""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta

import httpx
import pytest
import redis.asyncio as aioredis
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from billing_core.clock import ManualClock
from billing_core.repo.api_clients import ApiClient
from billing_core.settings import CoreSettings
from services.api.admin import create_api_key_async
from services.api.app import create_app
from services.api.client_limits import ClientRateLimit
from services.api.settings import ApiSettings
from tests.integration.api.helpers import assert_problem, scalar, statements_sent, subscribe
from tests.support.processes import free_port


def client_from(app: FastAPI, address: str, key: str | None = None) -> httpx.AsyncClient:
    """A client of the app whose requests come from ``address``."""
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, client=(address, 40000)),
        base_url="http://api.test",
        headers={"Authorization": f"Bearer {key}"} if key else {},
    )


class Statements:
    """Counts the statements the API sends to the database (where key look-ups go)."""

    def __init__(self) -> None:
        self.count = 0
        self.key_look_ups = 0

    def __call__(self, statement: str) -> None:
        self.count += 1
        self.key_look_ups += "FROM api_client" in statement


@pytest.fixture
def statements(app: FastAPI) -> Iterator[Statements]:
    counter = Statements()
    with statements_sent(counter):
        yield counter


async def test_a_key_over_its_limit_gets_429_with_headers_and_recovers(
    app: FastAPI, settings: CoreSettings, clock: ManualClock
) -> None:
    key = await create_api_key_async(settings, "small", rate_limit_per_minute=3)
    async with client_from(app, "10.0.0.1", key) as c:
        answers = [await c.get("/plans") for _ in range(3)]
        assert [a.status_code for a in answers] == [200, 200, 200]
        assert [a.headers["ratelimit-remaining"] for a in answers] == ["2", "1", "0"]
        assert {a.headers["ratelimit-limit"] for a in answers} == {"3"}
        assert {a.headers["ratelimit-policy"] for a in answers} == {"3;w=60"}
        reset = int(answers[-1].headers["ratelimit-reset"])
        assert 1 <= reset <= 60

        refused = await c.get("/plans")
        body = assert_problem(refused, 429, "rate-limited")
        assert "3 requests in 60 s" in body["detail"]
        assert refused.headers["retry-after"] == str(reset)
        assert refused.headers["ratelimit-remaining"] == "0"
        assert refused.headers["ratelimit-limit"] == "3"

        # Other clients are not affected.
        other = await create_api_key_async(settings, "other", rate_limit_per_minute=3)
        async with client_from(app, "10.0.0.1", other) as o:
            assert (await o.get("/plans")).status_code == 200

        clock.advance(timedelta(seconds=reset))
        recovered = await c.get("/plans")
        assert recovered.status_code == 200
        assert recovered.headers["ratelimit-remaining"] == "2"


async def test_concurrent_requests_are_each_counted_once(
    app: FastAPI, settings: CoreSettings
) -> None:
    """Requests that arrive together share one Redis call; each is still counted once."""
    key = await create_api_key_async(settings, "burst", rate_limit_per_minute=25)
    async with client_from(app, "10.0.0.4", key) as c:
        answers = await asyncio.gather(*(c.get("/plans") for _ in range(60)))
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200] * 25 + [429] * 35
    remaining = sorted(
        int(a.headers["ratelimit-remaining"]) for a in answers if a.status_code == 200
    )
    assert remaining == list(range(25))


async def test_a_large_limit_is_reserved_in_blocks_and_never_passed_across_replicas(
    redis: aioredis.Redis, redis_prefix: str, clock: ManualClock
) -> None:
    """A limit of 12 000 per minute: each replica reserves numbers 100 at a time (a few Redis
    calls for thousands of requests), each request gets its own number, and two replicas
    together allow no more than the limit and refuse at most a block early each."""
    client = ApiClient(id=7, name="big", key_prefix="bk_big", rate_limit_per_minute=12_000)
    replicas = [
        ClientRateLimit(
            redis, key_prefix=redis_prefix, per_minute=60, window_seconds=60, clock=clock
        )
        for _ in range(2)
    ]
    first = await asyncio.gather(*(replicas[0].hit(client) for _ in range(150)))
    assert sorted(q.used for q in first if q is not None) == list(range(1, 151))
    (counter,) = await redis.keys(f"{redis_prefix}7:*")
    assert int(await redis.get(counter)) == 200  # two blocks of 100
    assert 0 < await redis.pttl(counter) <= 61_000

    allowed = sum(1 for q in first if q is not None and q.allowed)
    for i in range(12_500):
        quota = await replicas[i % 2].hit(client)
        assert quota is not None
        allowed += quota.allowed
    assert 12_000 - 2 * 99 <= allowed <= 12_000
    assert int(await redis.get(counter)) <= 12_650 + 2 * 100


async def test_the_default_limit_applies_to_keys_without_their_own(
    api_settings: ApiSettings, clock: ManualClock, engine: AsyncEngine, api_key: str
) -> None:
    application = create_app(
        api_settings.model_copy(
            update={"api_rate_limit_per_minute": 2, "api_rate_limit_window_seconds": 30}
        ),
        clock,
    )
    async with (
        application.router.lifespan_context(application),
        client_from(application, "10.0.0.2", api_key) as c,
    ):
        first = await c.get("/plans")
        assert first.headers["ratelimit-policy"] == "1;w=30"  # 2 per minute is 1 per 30 s
        assert_problem(await c.get("/plans"), 429, "rate-limited")


async def test_ten_thousand_bogus_tokens_cost_a_bounded_number_of_queries(
    app: FastAPI, statements: Statements, api_settings: ApiSettings
) -> None:
    limit = api_settings.auth_failures_per_address
    statuses: dict[int, int] = {}
    async with client_from(app, "203.0.113.9") as scanner:
        for _ in range(100):
            batch = await asyncio.gather(
                *(
                    scanner.get(
                        "/subscriptions/1",
                        headers={"Authorization": f"Bearer bk_{secrets.token_urlsafe(32)}"},
                    )
                    for _ in range(100)
                )
            )
            for response in batch:
                statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
    assert sum(statuses.values()) == 10_000
    assert set(statuses) == {401, 429}
    # Each look-up is one statement.
    assert statements.count == limit
    assert statuses == {401: limit, 429: 10_000 - limit}
    async with client_from(app, "203.0.113.9", f"bk_{secrets.token_urlsafe(32)}") as c:
        refused = await c.get("/plans")
    assert_problem(refused, 429, "rate-limited")
    assert int(refused.headers["retry-after"]) >= 1
    assert statements.count == limit
    # Another address is not refused.
    async with client_from(app, "203.0.113.10", f"bk_{secrets.token_urlsafe(32)}") as c:
        assert_problem(await c.get("/plans"), 401, "unauthorized")


async def test_a_parallel_burst_of_bogus_keys_passes_no_more_than_the_limit(
    app: FastAPI, statements: Statements, api_settings: ApiSettings
) -> None:
    """Each look-up is counted before the database is awaited: 200 requests sent together
    from one address get no more look-ups than the limit, the others a 429."""
    limit = api_settings.auth_failures_per_address
    async with client_from(app, "203.0.113.20") as scanner:
        answers = await asyncio.gather(
            *(
                scanner.get(
                    "/plans",
                    headers={"Authorization": f"Bearer bk_{secrets.token_urlsafe(32)}"},
                )
                for _ in range(200)
            )
        )
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [401] * limit + [429] * (200 - limit)
    assert statements.count == limit


async def test_a_valid_key_is_not_counted_as_unknown(
    app: FastAPI, api_settings: ApiSettings, api_key: str
) -> None:
    limit = api_settings.auth_failures_per_address
    async with client_from(app, "198.51.100.30") as c:
        for _ in range(limit - 1):
            bogus = {"Authorization": f"Bearer bk_{secrets.token_urlsafe(32)}"}
            assert_problem(await c.get("/plans", headers=bogus), 401, "unauthorized")
        assert (await c.get("/plans", headers={"Authorization": f"Bearer {api_key}"})).is_success
        last = {"Authorization": f"Bearer bk_{secrets.token_urlsafe(32)}"}
        assert_problem(await c.get("/plans", headers=last), 401, "unauthorized")
        next_one = {"Authorization": f"Bearer bk_{secrets.token_urlsafe(32)}"}
        assert_problem(await c.get("/plans", headers=next_one), 429, "rate-limited")


async def test_parallel_requests_with_one_new_key_share_one_look_up(
    app: FastAPI, statements: Statements, settings: CoreSettings, api_settings: ApiSettings
) -> None:
    key = await create_api_key_async(settings, "busy")
    burst = 3 * api_settings.auth_failures_per_address
    async with client_from(app, "198.51.100.40", key) as c:
        answers = await asyncio.gather(*(c.get("/plans") for _ in range(burst)))
    assert [a.status_code for a in answers] == [200] * burst
    assert statements.key_look_ups == 1


async def test_a_valid_key_from_a_scanning_address_still_works_once_verified(
    app: FastAPI, api_key: str, statements: Statements
) -> None:
    """An unknown key is remembered as unknown: the same bogus key again costs no look-up."""
    bogus = f"bk_{secrets.token_urlsafe(32)}"
    async with client_from(app, "198.51.100.7", bogus) as c:
        for _ in range(50):
            assert_problem(await c.get("/plans"), 401, "unauthorized")
    assert statements.count == 1
    async with client_from(app, "198.51.100.7", api_key) as c:
        assert (await c.get("/plans")).status_code == 200


@pytest.fixture
async def app_without_redis(
    api_settings: ApiSettings, clock: ManualClock, engine: AsyncEngine
) -> AsyncIterator[FastAPI]:
    """The API with a Redis URL where nothing listens (Redis down)."""
    application = create_app(
        api_settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{free_port()}/0"}),
        clock,
    )
    async with application.router.lifespan_context(application):
        yield application


async def test_with_redis_down_reads_go_on_and_writes_wait(
    app_without_redis: FastAPI, app: FastAPI, api_key: str, engine: AsyncEngine
) -> None:
    async with client_from(app, "10.0.0.3", api_key) as working:
        sub = await subscribe(working)
    async with client_from(app_without_redis, "10.0.0.3", api_key) as c:
        read = await c.get(f"/subscriptions/{sub['id']}")
        assert read.status_code == 200
        assert "ratelimit-limit" not in read.headers
        assert (await c.get("/plans")).status_code == 200

        write = await c.post(
            f"/subscriptions/{sub['id']}/cancel",
            json={"atPeriodEnd": False},
            headers={"Idempotency-Key": str(uuid.uuid4())},
        )
        assert_problem(write, 503, "rate-limit-unavailable")
        assert write.headers["retry-after"] == "1"
        created = await c.post(
            "/subscriptions",
            json={"customerId": 1, "planCode": "BASIC_MONTHLY"},
            headers={"Idempotency-Key": str(uuid.uuid4())},
        )
        assert_problem(created, 503, "rate-limit-unavailable")
    assert await scalar(engine, "SELECT count(*) FROM subscription") == 1
    assert await scalar(engine, "SELECT status FROM subscription") == "ACTIVE"
