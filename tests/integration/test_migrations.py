"""The migrations build the schema the code expects, and go down and up again cleanly."""

from __future__ import annotations

import asyncio
import gc

import asyncpg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine

from billing_core.db import migrate
from billing_core.db.tables import metadata
from tests.support.db import recreate_database
from tests.support.infra import Services, checkout_database_name


def _dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


@pytest.fixture(scope="module")
def scratch_url(services: Services) -> str:
    name = checkout_database_name() + "_mig"
    asyncio.run(recreate_database(services.admin_database_url, name))
    return services.database_url(name)


async def _tables(url: str) -> set[str]:
    conn = await asyncpg.connect(_dsn(url))
    try:
        rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        return {r["tablename"] for r in rows}
    finally:
        await conn.close()


def test_upgrade_downgrade_upgrade_on_empty_database(scratch_url: str) -> None:
    migrate.upgrade(scratch_url)
    assert set(metadata.tables) <= asyncio.run(_tables(scratch_url))
    migrate.downgrade(scratch_url, "base")
    assert asyncio.run(_tables(scratch_url)) <= {"alembic_version"}
    migrate.upgrade(scratch_url)
    assert set(metadata.tables) <= asyncio.run(_tables(scratch_url))


def test_migrations_match_the_code_schema(database_url: str) -> None:
    sync_url = database_url.replace("postgresql+asyncpg://", "postgresql+psycopg://")
    engine = create_engine(sync_url)
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), metadata)
    finally:
        engine.dispose()
    assert diff == []


async def _index(url: str, name: str) -> asyncpg.Record | None:
    conn = await asyncpg.connect(_dsn(url))
    try:
        return await conn.fetchrow(
            """
            SELECT i.indisunique AS unique,
                   pg_get_expr(i.indpred, i.indrelid) AS predicate,
                   array_agg(a.attname ORDER BY k.ord) AS columns
            FROM pg_index i
            JOIN pg_class c ON c.oid = i.indexrelid
            JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) ON true
            JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
            WHERE c.relname = $1
            GROUP BY i.indisunique, i.indpred, i.indrelid
            """,
            name,
        )
    finally:
        await conn.close()


async def test_catalog_has_one_renewal_per_period_and_the_partial_indexes(
    database_url: str,
) -> None:
    renewal = await _index(database_url, "uq_invoice_renewal_period")
    assert renewal is not None
    assert renewal["unique"] is True
    assert list(renewal["columns"]) == ["subscription_id", "period_start"]
    assert renewal["predicate"] == "((kind)::text = 'RENEWAL'::text)"

    due = await _index(database_url, "idx_sub_due")
    assert due is not None
    assert list(due["columns"]) == ["current_period_end"]
    # ACTIVE subscriptions renew, TRIALING ones are invoiced at the trial's end: one claim.
    assert due["predicate"] == (
        "((status)::text = ANY ((ARRAY['ACTIVE'::character varying, "
        "'TRIALING'::character varying])::text[]))"
    )

    retry = await _index(database_url, "idx_inv_retry")
    assert retry is not None
    assert list(retry["columns"]) == ["next_attempt_at"]
    assert retry["predicate"] == "((status)::text = 'OPEN'::text)"

    # The collector's backlog hashes the paused subscriptions: found without reading them all.
    paused = await _index(database_url, "idx_sub_paused")
    assert paused is not None
    assert list(paused["columns"]) == ["id"]
    assert paused["predicate"] == "(paused_at IS NOT NULL)"


async def test_money_is_bigint_and_time_is_timestamptz(database_url: str) -> None:
    conn = await asyncpg.connect(_dsn(database_url))
    try:
        rows = await conn.fetch(
            """
            SELECT table_name, column_name, data_type FROM information_schema.columns
            WHERE table_schema = 'public'
              AND (column_name IN ('price_amount', 'amount', 'subtotal', 'credit_applied',
                                   'credit_balance') OR column_name LIKE '%\\_at'
                   OR column_name LIKE 'period\\_%' OR column_name = 'billing_anchor')
              AND column_name <> 'period_index'
            """
        )
    finally:
        await conn.close()
    kinds = {(r["table_name"], r["column_name"]): r["data_type"] for r in rows}
    assert kinds, "no money or time columns found"
    for (table, column), kind in kinds.items():
        money = column in ("price_amount", "amount", "subtotal", "credit_applied", "credit_balance")
        expected = "bigint" if money else "timestamp with time zone"
        assert kind == expected, f"{table}.{column} is {kind}"


async def test_status_columns_reject_unknown_values(database_url: str) -> None:
    conn = await asyncpg.connect(_dsn(database_url))
    try:
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute(
                "INSERT INTO plan (code, name, price_amount, currency, billing_interval) "
                "VALUES ('X', 'x', 1, 'EUR', 'WEEK')"
            )
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute(
                "INSERT INTO plan (code, name, price_amount, currency, billing_interval) "
                "VALUES ('Y', 'y', -1, 'EUR', 'MONTH')"
            )
    finally:
        await conn.close()


def test_announced_reconciliation_requests_become_open_items(scratch_url: str) -> None:
    """0004 turns the PaymentReconciliationNeeded events still in the outbox into open
    reconciliation items, so ``billing reconcile`` lists what was announced before it."""
    migrate.downgrade(scratch_url, "base")
    migrate.upgrade(scratch_url, "0003")

    async def before() -> int:
        conn = await asyncpg.connect(_dsn(scratch_url))
        try:
            sub = await conn.fetchval(
                "INSERT INTO subscription (customer_id, plan_id, status, billing_anchor, "
                "current_period_start, current_period_end) SELECT 7, id, 'CANCELED', now(), "
                "now(), now() + interval '30 days' FROM plan ORDER BY id LIMIT 1 RETURNING id"
            )
            invoice = await conn.fetchval(
                "INSERT INTO invoice (subscription_id, customer_id, kind, period_index, "
                "period_start, period_end, subtotal, amount, currency, status) VALUES ($1, 7, "
                "'RENEWAL', 0, now(), now() + interval '30 days', 990, 990, 'EUR', 'VOID') "
                "RETURNING id",
                sub,
            )
            payload = (
                f'{{"invoiceId": {invoice}, "reason": "charged_settled_invoice", '
                f'"idempotencyKey": "inv-{invoice}-try-0", "gatewayReference": "ch_1"}}'
            )
            await conn.execute(
                "INSERT INTO outbox_event (event_id, aggregate_id, sequence, event_type, payload, "
                "occurred_at) VALUES (gen_random_uuid(), $1, 1, 'PaymentReconciliationNeeded', "
                "CAST($2 AS jsonb), now())",
                sub,
                payload,
            )
            return int(invoice)
        finally:
            await conn.close()

    invoice = asyncio.run(before())
    migrate.upgrade(scratch_url)

    async def items() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(_dsn(scratch_url))
        try:
            found = list(await conn.fetch("SELECT * FROM reconciliation_item"))
            await conn.execute(  # leave the scratch database empty again
                "TRUNCATE reconciliation_item, outbox_event, invoice, subscription CASCADE"
            )
            return found
        finally:
            await conn.close()

    (item,) = asyncio.run(items())
    assert (item["invoice_id"], item["kind"], item["reason"]) == (
        invoice,
        "charged_settled_invoice",
        "charged_settled_invoice",
    )
    assert (item["idempotency_key"], item["gateway_reference"], item["resolved_at"]) == (
        f"inv-{invoice}-try-0",
        "ch_1",
        None,
    )
    migrate.downgrade(scratch_url, "base")


def test_keys_from_before_scopes_keep_full_access(scratch_url: str) -> None:
    """0008 gives the API keys that exist when it runs every scope; new keys name theirs."""
    migrate.downgrade(scratch_url, "base")
    migrate.upgrade(scratch_url, "0007")

    async def insert_key() -> None:
        conn = await asyncpg.connect(_dsn(scratch_url))
        try:
            await conn.execute(
                "INSERT INTO api_client (name, key_prefix, key_hash) VALUES ('old', 'bk_old', "
                "'\\x01')"
            )
        finally:
            await conn.close()

    asyncio.run(insert_key())
    migrate.upgrade(scratch_url)

    async def after() -> tuple[list[str], bool]:
        conn = await asyncpg.connect(_dsn(scratch_url))
        try:
            scopes = await conn.fetchval("SELECT scopes FROM api_client WHERE name = 'old'")
            try:
                await conn.execute(
                    "INSERT INTO api_client (name, key_prefix, key_hash) VALUES ('new', 'bk_new', "
                    "'\\x02')"
                )
                refused = False
            except asyncpg.NotNullViolationError:
                refused = True
            await conn.execute("TRUNCATE api_client CASCADE")
            return list(scopes), refused
        finally:
            await conn.close()

    scopes, new_key_without_scopes_refused = asyncio.run(after())
    assert scopes == [
        "plans:read",
        "subscriptions:read",
        "subscriptions:write",
        "invoices:read",
        "admin",
        "payment_methods:write",  # 0020: it held subscriptions:write
    ]
    assert new_key_without_scopes_refused
    migrate.downgrade(scratch_url, "base")


def test_keys_that_could_set_payment_methods_keep_that_right(scratch_url: str) -> None:
    """0020: a key holding subscriptions:write (the scope the payment-method route needed
    before) gets payment_methods:write; any other key does not; downgrade takes it away."""
    migrate.downgrade(scratch_url, "base")
    migrate.upgrade(scratch_url, "0019")

    async def keys(sql: str = "") -> dict[str, list[str]]:
        conn = await asyncpg.connect(_dsn(scratch_url))
        try:
            if sql:
                await conn.execute(sql)
            rows = await conn.fetch("SELECT name, scopes FROM api_client ORDER BY name")
            return {r["name"]: list(r["scopes"]) for r in rows}
        finally:
            await conn.close()

    asyncio.run(
        keys(
            "INSERT INTO api_client (name, key_prefix, key_hash, scopes) VALUES"
            " ('reader', 'bk_r', '\\x01', ARRAY['subscriptions:read']),"
            " ('writer', 'bk_w', '\\x02', ARRAY['subscriptions:read', 'subscriptions:write'])"
        )
    )
    migrate.upgrade(scratch_url)
    assert asyncio.run(keys()) == {
        "reader": ["subscriptions:read"],
        "writer": ["subscriptions:read", "subscriptions:write", "payment_methods:write"],
    }
    migrate.downgrade(scratch_url, "0019")
    assert asyncio.run(keys("")) == {
        "reader": ["subscriptions:read"],
        "writer": ["subscriptions:read", "subscriptions:write"],
    }
    asyncio.run(keys("TRUNCATE api_client CASCADE"))
    migrate.downgrade(scratch_url, "base")


def test_existing_customer_ids_become_customers(scratch_url: str) -> None:
    """0009 gives every customer id already in use (on a subscription, or with a payment
    method on file) a customer row with that id, its external id that number and the time zone
    of its first subscription; new customers get ids above them."""
    migrate.downgrade(scratch_url, "base")
    migrate.upgrade(scratch_url, "0008")

    async def before() -> None:
        conn = await asyncpg.connect(_dsn(scratch_url))
        try:
            for customer, zone in ((7, "Europe/Paris"), (7, "Asia/Tokyo"), (900, "UTC")):
                await conn.execute(
                    "INSERT INTO subscription (customer_id, plan_id, status, time_zone, "
                    "billing_anchor, current_period_start, current_period_end) SELECT $1, id, "
                    "'ACTIVE', $2, now(), now(), now() + interval '30 days' FROM plan "
                    "ORDER BY id LIMIT 1",
                    customer,
                    zone,
                )
            await conn.execute(
                "INSERT INTO gateway_customer (customer_id, gateway, gateway_customer_id, "
                "payment_method_id, created_at, updated_at) "
                "VALUES (1200, 'stripe', 'cus_1', 'pm_1', now(), now())"
            )
        finally:
            await conn.close()

    asyncio.run(before())
    migrate.upgrade(scratch_url)

    async def after() -> tuple[list[asyncpg.Record], int]:
        conn = await asyncpg.connect(_dsn(scratch_url))
        try:
            found = list(
                await conn.fetch("SELECT id, external_id, time_zone FROM customer ORDER BY id")
            )
            new_id = await conn.fetchval(
                "INSERT INTO customer (external_id) VALUES ('crm-new') RETURNING id"
            )
            await conn.execute("TRUNCATE customer, gateway_customer, subscription CASCADE")
            return found, int(new_id)
        finally:
            await conn.close()

    found, new_id = asyncio.run(after())
    assert [tuple(r) for r in found] == [
        (7, "7", "Europe/Paris"),
        (900, "900", "UTC"),
        (1200, "1200", "UTC"),
    ]
    assert new_id == 1201
    migrate.downgrade(scratch_url, "base")


def test_existing_invoices_get_their_lines(scratch_url: str) -> None:
    """0014 gives every invoice that exists when it runs the lines its figures say: the period
    (RENEWAL) or the plan change (PRORATION) worth the subtotal, and the credit it consumed as
    a CREDIT_APPLIED line; the lines then add up to the invoice's amount."""
    migrate.downgrade(scratch_url, "base")
    migrate.upgrade(scratch_url, "0013")

    async def before() -> None:
        conn = await asyncpg.connect(_dsn(scratch_url))
        try:
            sub = await conn.fetchval(
                "INSERT INTO subscription (customer_id, plan_id, status, time_zone, "
                "billing_anchor, current_period_start, current_period_end, credit_balance) "
                "SELECT 7, id, 'ACTIVE', 'UTC', now(), now(), now() + interval '30 days', 0 "
                "FROM plan ORDER BY id LIMIT 1 RETURNING id"
            )
            for kind, index, subtotal, credit in (
                ("RENEWAL", 0, 990, 0),
                ("PRORATION", 0, 1333, 300),
                ("RENEWAL", 1, 990, 990),
            ):
                await conn.execute(
                    "INSERT INTO invoice (subscription_id, customer_id, kind, period_index, "
                    "period_start, period_end, subtotal, credit_applied, amount, currency, "
                    "status) VALUES ($1, 7, $2, $3::int, now() + make_interval(days => 30 * $3), "
                    "now() + make_interval(days => 30 * $3 + 30), $4::bigint, $5::bigint, "
                    "$4::bigint - $5::bigint, 'EUR', 'OPEN')",
                    sub,
                    kind,
                    index,
                    subtotal,
                    credit,
                )
        finally:
            await conn.close()

    asyncio.run(before())
    migrate.upgrade(scratch_url)

    async def after() -> tuple[list[tuple[object, ...]], list[asyncpg.Record]]:
        conn = await asyncpg.connect(_dsn(scratch_url))
        try:
            lines = [
                tuple(r)
                for r in await conn.fetch(
                    "SELECT i.kind, l.line_no, l.kind, l.amount FROM invoice_line l "
                    "JOIN invoice i ON i.id = l.invoice_id ORDER BY i.id, l.line_no"
                )
            ]
            wrong = list(
                await conn.fetch(
                    "SELECT i.id FROM invoice i JOIN invoice_line l ON l.invoice_id = i.id "
                    "GROUP BY i.id HAVING i.amount <> sum(l.amount)"
                )
            )
            await conn.execute("TRUNCATE subscription CASCADE")
            return lines, wrong
        finally:
            await conn.close()

    lines, wrong = asyncio.run(after())
    assert lines == [
        ("RENEWAL", 1, "PLAN_PERIOD", 990),
        ("PRORATION", 1, "PRORATION_CHARGE", 1333),
        ("PRORATION", 2, "CREDIT_APPLIED", -300),
        ("RENEWAL", 1, "PLAN_PERIOD", 990),
        ("RENEWAL", 2, "CREDIT_APPLIED", -990),
    ]
    assert wrong == []
    migrate.downgrade(scratch_url, "base")


def test_pauses_go_down_only_when_none_is_left(scratch_url: str) -> None:
    """0011 adds the pause columns and DRAFT invoices; going below it refuses while a
    subscription is paused, and works once it is resumed."""
    migrate.downgrade(scratch_url, "base")
    migrate.upgrade(scratch_url, "0011")

    async def run(sql: str) -> None:
        conn = await asyncpg.connect(_dsn(scratch_url))
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(
        run(
            "INSERT INTO subscription (customer_id, plan_id, status, billing_anchor, "
            "current_period_start, current_period_end, pause_behavior, paused_at) SELECT 7, id, "
            "'ACTIVE', now(), now(), now() + interval '30 days', 'void', now() FROM plan "
            "ORDER BY id LIMIT 1"
        )
    )
    with pytest.raises(Exception, match="paused subscriptions"):
        migrate.downgrade(scratch_url, "0010")
    gc.collect()  # a connection the refused downgrade left open would warn (an error) here
    with pytest.raises(asyncpg.CheckViolationError):
        asyncio.run(run("UPDATE subscription SET paused_at = NULL"))
    asyncio.run(run("UPDATE subscription SET pause_behavior = NULL, paused_at = NULL"))
    migrate.downgrade(scratch_url, "0010")
    migrate.upgrade(scratch_url, "0011")
    asyncio.run(run("TRUNCATE subscription CASCADE"))
    migrate.downgrade(scratch_url, "base")


def test_customer_numbers_in_use_become_customers_then_foreign_keys(scratch_url: str) -> None:
    """0019 gives every customer number still bare (on a subscription, an invoice or a payment
    method on file, written after 0009) a customer row, moves new customers' ids past them and
    then makes subscription, invoice and gateway_customer reference customer; going down drops
    the references only."""
    migrate.downgrade(scratch_url, "base")
    migrate.upgrade(scratch_url, "0018")

    async def before() -> None:
        conn = await asyncpg.connect(_dsn(scratch_url))
        try:
            await conn.execute(
                "INSERT INTO customer (external_id, email) VALUES ('crm-1', 'a@example.test')"
            )
            sub = await conn.fetchval(
                "INSERT INTO subscription (customer_id, plan_id, status, time_zone, "
                "billing_anchor, current_period_start, current_period_end) SELECT 70, id, "
                "'ACTIVE', 'Asia/Tokyo', now(), now(), now() + interval '30 days' FROM plan "
                "ORDER BY id LIMIT 1 RETURNING id"
            )
            await conn.execute(
                "INSERT INTO invoice (subscription_id, customer_id, kind, period_index, "
                "period_start, period_end, subtotal, amount, currency, status) "
                "VALUES ($1, 71, 'RENEWAL', 0, now(), now() + interval '30 days', 0, 0, "
                "'EUR', 'PAID')",
                sub,
            )
            await conn.execute(
                "INSERT INTO gateway_customer (customer_id, gateway, gateway_customer_id, "
                "payment_method_id, created_at, updated_at) "
                "VALUES (1200, 'stripe', 'cus_1', 'pm_1', now(), now())"
            )
        finally:
            await conn.close()

    async def unknown_customer_subscribes() -> None:
        conn = await asyncpg.connect(_dsn(scratch_url))
        try:
            await conn.execute(
                "INSERT INTO subscription (customer_id, plan_id, status, billing_anchor, "
                "current_period_start, current_period_end) SELECT 999999, id, 'ACTIVE', now(), "
                "now(), now() + interval '30 days' FROM plan ORDER BY id LIMIT 1"
            )
        finally:
            await conn.close()

    async def after() -> tuple[list[asyncpg.Record], int]:
        conn = await asyncpg.connect(_dsn(scratch_url))
        try:
            found = list(
                await conn.fetch("SELECT id, external_id, time_zone FROM customer ORDER BY id")
            )
            new_id = await conn.fetchval(
                "INSERT INTO customer (external_id) VALUES ('crm-new') RETURNING id"
            )
            return found, int(new_id)
        finally:
            await conn.close()

    async def empty() -> None:
        conn = await asyncpg.connect(_dsn(scratch_url))
        try:
            await conn.execute("TRUNCATE customer, gateway_customer, subscription CASCADE")
        finally:
            await conn.close()

    asyncio.run(before())
    migrate.upgrade(scratch_url)
    found, new_id = asyncio.run(after())
    assert [tuple(r) for r in found] == [
        (1, "crm-1", "UTC"),
        (70, "70", "Asia/Tokyo"),
        (71, "71", "UTC"),
        (1200, "1200", "UTC"),
    ]
    assert new_id == 1201
    with pytest.raises(asyncpg.ForeignKeyViolationError):
        asyncio.run(unknown_customer_subscribes())

    migrate.downgrade(scratch_url, "0018")
    asyncio.run(unknown_customer_subscribes())  # no reference below 0019
    asyncio.run(empty())
    migrate.upgrade(scratch_url)
    migrate.downgrade(scratch_url, "base")
