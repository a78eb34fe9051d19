"""The ``billing`` command: one entry point for every process and operator task."""

from __future__ import annotations

from typing import Annotated, Any

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Subscription billing service.")


@app.command()
def migrate(revision: str = typer.Argument("head")) -> None:
    """Apply the database migrations (up to REVISION, default head)."""
    from billing_core.db import migrate as migrations  # noqa: PLC0415
    from billing_core.settings import CoreSettings  # noqa: PLC0415

    migrations.upgrade(CoreSettings().database_url, revision)
    typer.echo(f"database migrated to {revision}")


@app.command()
def api() -> None:
    """Run the HTTP API (uvicorn)."""
    from services.api.main import main as run  # noqa: PLC0415

    run()


@app.command("create-api-key")
def create_api_key(name: str = typer.Argument(..., help="Who the key is for.")) -> None:
    """Create a full-access API client and print its key (``api-keys create`` with every
    scope)."""
    from services.api.admin import create_api_key as create  # noqa: PLC0415
    from services.api.settings import ApiSettings  # noqa: PLC0415

    typer.echo(create(ApiSettings(), name))


api_keys = typer.Typer(no_args_is_help=True, help="API keys: create, list, revoke, rotate.")
app.add_typer(api_keys, name="api-keys")


def _key_settings() -> Any:
    from services.api.settings import ApiSettings  # noqa: PLC0415

    return ApiSettings(process_name="api-keys")


def _fail(exc: Exception) -> typer.Exit:
    typer.echo(f"error: {exc}", err=True)
    return typer.Exit(2)


@api_keys.command("create")
def api_keys_create(
    name: str = typer.Argument(..., help="Who the key is for."),
    scope: Annotated[
        list[str],
        typer.Option(
            "--scope",
            help="plans:read, subscriptions:read, subscriptions:write, invoices:read, admin "
            "(repeat, or comma-separated; 'all' for every one).",
        ),
    ] = [],  # noqa: B006
    expires_in: str = typer.Option("", help="Lifetime, e.g. 90d, 12h (default: no expiry)."),
    rate_limit: int = typer.Option(
        0, help="Requests per minute (default: BILLING_API_RATE_LIMIT_PER_MINUTE)."
    ),
) -> None:
    """Create an API key with its scopes; print the key (shown once, only its hash is kept)."""
    from billing_core.domain.errors import DomainError  # noqa: PLC0415
    from billing_core.domain.scopes import ALL_SCOPES, parse_scopes  # noqa: PLC0415
    from services.api.admin import create_key, parse_duration  # noqa: PLC0415

    try:
        scopes = ALL_SCOPES if scope == ["all"] else parse_scopes(scope)
        if not scopes:
            raise ValueError("give at least one --scope")
        if rate_limit < 0:
            raise ValueError("--rate-limit must be positive")
        new = create_key(
            _key_settings(),
            name,
            scopes=scopes,
            expires_in=parse_duration(expires_in) if expires_in else None,
            rate_limit_per_minute=rate_limit or None,
        )
    except (ValueError, DomainError) as exc:
        raise _fail(exc) from exc
    typer.echo(new.key)
    typer.echo(
        f"prefix {new.info.key_prefix}  scopes {','.join(new.info.scopes)}  expires "
        f"{new.info.expires_at.isoformat() if new.info.expires_at else 'never'}",
        err=True,
    )


@api_keys.command("list")
def api_keys_list(
    all_keys: bool = typer.Option(False, "--all", help="Also revoked and expired keys."),
) -> None:
    """List keys: prefix, name, scopes, created, last used, expires (never the keys)."""
    from services.api.admin import list_keys  # noqa: PLC0415

    now, keys = list_keys(_key_settings(), include_inactive=all_keys)

    def when(value: Any) -> str:
        return value.strftime("%Y-%m-%d %H:%M") if value is not None else "-"

    typer.echo(
        f"{'PREFIX':<12} {'STATUS':<8} {'NAME':<20} {'CREATED':<16} {'LAST USED':<16} "
        f"{'EXPIRES':<16} SCOPES"
    )
    for k in keys:
        typer.echo(
            f"{k.key_prefix:<12} {k.status_at(now):<8} {k.name[:20]:<20} {when(k.created_at):<16} "
            f"{when(k.last_used_at):<16} {when(k.expires_at):<16} {','.join(k.scopes)}"
        )


@api_keys.command("revoke")
def api_keys_revoke(
    prefix: str = typer.Argument(..., help="The key's prefix (from list)."),
) -> None:
    """Revoke a key: it stops working within BILLING_AUTH_CACHE_SECONDS."""
    from billing_core.domain.errors import DomainError  # noqa: PLC0415
    from services.api.admin import revoke_key  # noqa: PLC0415

    try:
        info = revoke_key(_key_settings(), prefix)
    except DomainError as exc:
        raise _fail(exc) from exc
    typer.echo(f"revoked {info.key_prefix} ({info.name})")


@api_keys.command("rotate")
def api_keys_rotate(
    prefix: str = typer.Argument(..., help="The key's prefix (from list)."),
    grace: str = typer.Option("24h", help="How long the old key keeps working."),
    expires_in: str = typer.Option("", help="Lifetime of the new key (default: no expiry)."),
) -> None:
    """A new key with the same name, scopes and limit; print it. The old one keeps working
    for the grace period."""
    from billing_core.domain.errors import DomainError  # noqa: PLC0415
    from services.api.admin import parse_duration, rotate_key  # noqa: PLC0415

    try:
        old, new = rotate_key(
            _key_settings(),
            prefix,
            grace=parse_duration(grace),
            expires_in=parse_duration(expires_in) if expires_in else None,
        )
    except (ValueError, DomainError) as exc:
        raise _fail(exc) from exc
    typer.echo(new.key)
    assert old.expires_at is not None
    typer.echo(
        f"new prefix {new.info.key_prefix}; {old.key_prefix} works until "
        f"{old.expires_at.isoformat()}",
        err=True,
    )


@app.command()
def renewer() -> None:
    """Run the renewer: invoices due subscriptions and advances their periods."""
    from services.renewer.main import main as run  # noqa: PLC0415

    run()


@app.command()
def collector() -> None:
    """Run the collector: charges open invoices at the gateway's rate, with dunning."""
    from services.collector.main import main as run  # noqa: PLC0415

    run()


@app.command()
def relay() -> None:
    """Run the outbox relay: publishes events to Kafka."""
    from services.relay.main import main as run  # noqa: PLC0415

    run()


@app.command()
def notifier() -> None:
    """Run the e-mail notifier: a reference consumer of the billing events."""
    from services.notifier.main import main as run  # noqa: PLC0415

    run()


@app.command("gateway-sim")
def gateway_sim() -> None:
    """Run the payment gateway simulator (development, demos, tests, benchmarks)."""
    from services.gateway_sim.main import main as run  # noqa: PLC0415

    run()


@app.command("mail-server")
def mail_server(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="SMTP port.")] = 52525,
    directory: Annotated[
        str, typer.Option("--dir", help="Where received messages are kept (DIR/new/*.eml).")
    ] = "var/mail",
    log_json: Annotated[bool, typer.Option(envvar="BILLING_LOG_JSON")] = False,
) -> None:
    """Run the development SMTP server: keeps every message it receives as a file
    (development and tests; `scripts/infra.sh up` starts one on port 52525)."""
    from pathlib import Path  # noqa: PLC0415

    from billing_core.logging import configure_logging  # noqa: PLC0415
    from services.mail_server.main import serve  # noqa: PLC0415

    configure_logging("billing.mail_server", "INFO", log_json)
    serve(host, port, Path(directory))


@app.command("run-all")
def run_all(
    procfile: Annotated[str, typer.Option("-f", "--procfile", help="The Procfile.")] = "Procfile",
    env: Annotated[
        list[str] | None, typer.Option("-e", "--env", help="Env file(s), over the environment.")
    ] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="NAME=VALUE, over the env files.")
    ] = None,
) -> None:
    """Run every process of the Procfile together (`make up`); JSON lines only when
    BILLING_LOG_JSON=true."""
    from pathlib import Path  # noqa: PLC0415

    from services.ops.run_all import run  # noqa: PLC0415

    bad = [item for item in set_ or [] if "=" not in item]
    if bad:
        raise typer.BadParameter(f"expected NAME=VALUE, got {bad[0]!r}", param_hint="--set")
    overrides = dict(item.split("=", 1) for item in set_ or [])
    raise typer.Exit(run(Path(procfile), [Path(e) for e in env or []], overrides))


@app.command()
def contracts(
    check_only: Annotated[
        bool, typer.Option("--check", help="Change nothing; exit 1 if a file is out of date.")
    ] = False,
    root: Annotated[str, typer.Option(help="The repository's root folder.")] = ".",
) -> None:
    """Regenerate the contract files (event schemas, AsyncAPI, docs/EVENTS.md, OpenAPI, the
    scope table of docs/API.md, the PrometheusRule)."""
    from pathlib import Path  # noqa: PLC0415

    from services.ops.contracts import artifacts  # noqa: PLC0415

    files = artifacts.all_artifacts(Path(root))
    if check_only:
        stale = artifacts.differences(Path(root), files)
        for path in stale:
            typer.echo(f"out of date: {path} (run `make contracts`)", err=True)
        raise typer.Exit(1 if stale else 0)
    for path in artifacts.write(Path(root), files):
        typer.echo(f"wrote {path}")


@app.command()
def check(
    gateway_url: str = typer.Option(
        "http://127.0.0.1:8100",
        help="Gateway (simulator) whose ledger is the charge evidence; '' to use the DB's "
        "payment attempts instead.",
    ),
    topic: str = typer.Option("", help="Kafka topic to read (default: BILLING_KAFKA_TOPIC)."),
    no_kafka: bool = typer.Option(False, help="Skip the Kafka evidence (events, sequences)."),
    now: str = typer.Option("", help="Check as of this ISO-8601 time (default: the clock)."),
    renewal_tolerance_s: int = typer.Option(300, help="How late an ACTIVE renewal may be."),
    retry_bound_s: int = typer.Option(
        17 * 60, help="How long an OPEN invoice may stay past due (retry delay + lease)."
    ),
    publish_bound_s: int = typer.Option(300, help="How long an event may wait in the outbox."),
    since: str = typer.Option(
        "", help="ISO-8601: invoices paid / subscriptions canceled before it need no evidence."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print one JSON document (every violation) instead of the table."
    ),
) -> None:
    """Check the hard invariants from independent evidence; exit 1 on any violation."""
    import asyncio  # noqa: PLC0415
    import json  # noqa: PLC0415
    from datetime import datetime, timedelta  # noqa: PLC0415

    from billing_core.clock import clock_from_offset  # noqa: PLC0415
    from billing_core.db import pg  # noqa: PLC0415
    from billing_core.invariants.checker import run_checker  # noqa: PLC0415
    from billing_core.logging import configure_logging  # noqa: PLC0415
    from billing_core.settings import CoreSettings  # noqa: PLC0415

    def instant(value: str, option: str) -> datetime:
        parsed = datetime.fromisoformat(value)
        if parsed.tzinfo is None:
            raise typer.BadParameter(f"{option} needs a UTC offset, e.g. 2026-12-01T00:00:00Z")
        return parsed

    settings = CoreSettings(process_name="check")
    if as_json:  # stdout holds the document alone; log lines go to stderr
        configure_logging(settings.process_name, settings.log_level, settings.log_json)
    at = instant(now, "--now") if now else clock_from_offset(settings.clock_offset_seconds).now()

    async def go() -> bool:
        pool = await pg.create_pool(settings, max_size=1)
        try:
            report = await run_checker(
                pool,
                now=at,
                gateway_url=gateway_url or None,
                kafka_bootstrap=None if no_kafka else settings.kafka_bootstrap,
                topic=topic or settings.kafka_topic,
                renewal_tolerance=timedelta(seconds=renewal_tolerance_s),
                retry_bound=timedelta(seconds=retry_bound_s),
                publish_bound=timedelta(seconds=publish_bound_s),
                since=instant(since, "--since") if since else None,
            )
        finally:
            await pool.close()
        if as_json:
            typer.echo(json.dumps(report.as_dict()))
        else:
            report.render()
        return report.ok

    if not asyncio.run(go()):
        raise typer.Exit(1)


@app.command()
def seed(
    count: int = typer.Argument(10_000, help="How many subscriptions."),
    due_in_s: int = typer.Option(60, help="They come due from now..."),
    window_s: int = typer.Option(86_400, help="...spread over this many seconds."),
    first_customer_id: int = typer.Option(1, help="Customer ids start here."),
    email_domain: str | None = typer.Option(
        None, help="Give each customer the address customer-<id>@<this domain>."
    ),
) -> None:
    """Seed realistic subscriptions (plans, time zones, due times), one customer each, with
    their paid history."""
    import asyncio  # noqa: PLC0415
    from datetime import timedelta  # noqa: PLC0415

    from billing_core.clock import clock_from_offset  # noqa: PLC0415
    from billing_core.settings import CoreSettings  # noqa: PLC0415
    from services.ops.seed import seed as run_seed  # noqa: PLC0415

    settings = CoreSettings()
    now = clock_from_offset(settings.clock_offset_seconds).now()
    inserted = asyncio.run(
        run_seed(
            settings.database_url,
            count=count,
            due_from=now + timedelta(seconds=due_in_s),
            due_window=timedelta(seconds=max(window_s, 1)),
            first_customer_id=first_customer_id,
            email_domain=email_domain,
        )
    )
    typer.echo(f"seeded {inserted} subscriptions")


@app.command()
def status(
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document, not tables."),
) -> None:
    """Backlogs: due subscriptions, invoices by attempt, outbox lag, gateway budget use."""
    import asyncio  # noqa: PLC0415
    import json  # noqa: PLC0415

    from billing_core.clock import clock_from_offset  # noqa: PLC0415
    from billing_core.db import pg  # noqa: PLC0415
    from billing_core.logging import configure_logging  # noqa: PLC0415
    from services.collector.settings import CollectorSettings  # noqa: PLC0415
    from services.ops.status import as_dict, gather, render  # noqa: PLC0415

    settings = CollectorSettings(process_name="status")
    if as_json:  # stdout holds the document alone; log lines go to stderr
        configure_logging(settings.process_name, settings.log_level, settings.log_json)
    now = clock_from_offset(settings.clock_offset_seconds).now()

    async def go() -> None:
        pool = await pg.create_pool(settings, max_size=1)
        try:
            result = await gather(
                pool,
                now,
                settings.redis_url,
                settings.collector_rate_limit_key,
                settings.collector_rate_limit_per_second,
                settings.collector_rate_limit_guard_ms,
            )
        finally:
            await pool.close()
        if as_json:
            typer.echo(json.dumps(as_dict(result, now)))
        else:
            render(result, now)

    asyncio.run(go())


@app.command()
def reconcile(
    resolve: int = typer.Option(0, "--resolve", help="Mark the item with this id resolved."),
    note: str = typer.Option("", "--note", help="How it was settled (required with --resolve)."),
    by: str = typer.Option("", "--by", help="Who settled it (default: the login name)."),
    include_resolved: bool = typer.Option(
        False, "--all", help="List the resolved items too, with who resolved them and how."
    ),
) -> None:
    """What needs a person (held invoices, mismatched reports, refused refunds); --resolve."""
    import asyncio  # noqa: PLC0415
    import getpass  # noqa: PLC0415

    from billing_core.clock import clock_from_offset  # noqa: PLC0415
    from billing_core.db import pg  # noqa: PLC0415
    from billing_core.settings import CoreSettings  # noqa: PLC0415
    from services.ops.reconcile import gather, render  # noqa: PLC0415
    from services.ops.reconcile import resolve as mark_resolved  # noqa: PLC0415

    if resolve and not note.strip():
        raise typer.BadParameter("say how it was settled", param_hint="--note")
    settings = CoreSettings(process_name="reconcile")
    now = clock_from_offset(settings.clock_offset_seconds).now()

    async def go() -> bool:
        pool = await pg.create_pool(settings, max_size=1)
        try:
            if resolve:
                who = by.strip() or getpass.getuser()
                return await mark_resolved(pool, resolve, who=who, how=note.strip(), now=now)
            render(await gather(pool, include_resolved=include_resolved))
            return True
        finally:
            await pool.close()

    done = asyncio.run(go())
    if resolve and not done:
        typer.echo(f"no open item {resolve}", err=True)
        raise typer.Exit(1)
    if resolve:
        typer.echo(f"item {resolve} resolved")


@app.command()
def demo(
    subscriptions: int = typer.Option(20_000, help="Subscriptions coming due."),
    due_within_s: int = typer.Option(60, help="They all come due within this many seconds."),
    decline_share: float = typer.Option(0.01, help="Share of cards that decline (dunning)."),
    timeout_s: int = typer.Option(900, help="Give up after this many seconds."),
    gateway_url: str = typer.Option("http://127.0.0.1:8100", help="The gateway simulator."),
    gateway_timeout_s: float = typer.Option(
        120, help="How long each read of the simulator's ledger may take."
    ),
    plot: str = typer.Option("var/demo/demo.png", help="Where the PNG plot goes."),
    wait_for: Annotated[
        list[str] | None,
        typer.Option(
            help="Health URL that must answer before the demo starts (repeatable; default: "
            "the simulator, the API and the workers of `make up`)."
        ),
    ] = None,
    wait_s: float = typer.Option(60, help="How long to wait for them."),
) -> None:
    """Run a small "1st of the month" on the running system (`make up`) and summarise it.

    Exits 1 with one line saying why when the system did not drain, something was charged
    twice, or a process did not answer; once it has seeded, the summary and the plot are
    written all the same.
    """
    import asyncio  # noqa: PLC0415
    from datetime import timedelta  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    from rich.console import Console  # noqa: PLC0415

    from billing_core.clock import clock_from_offset  # noqa: PLC0415
    from billing_core.db import pg  # noqa: PLC0415
    from billing_core.settings import CoreSettings  # noqa: PLC0415
    from services.ops.demo import DemoFailed, Outcome, run_demo, wait_for_processes  # noqa: PLC0415

    settings = CoreSettings(process_name="demo")
    console = Console()
    health = wait_for or [
        f"{gateway_url}/healthz",
        "http://127.0.0.1:8000/healthz",
        "http://127.0.0.1:9101/healthz",
        "http://127.0.0.1:9102/healthz",
        "http://127.0.0.1:9103/healthz",
    ]

    async def go() -> Outcome:
        missing = await wait_for_processes(health, timeout=wait_s)
        if missing:
            return Outcome(
                [
                    f"not answering after {wait_s:g} s: {', '.join(missing)} (start the system "
                    "with `make up`)"
                ]
            )
        pool = await pg.create_pool(settings, max_size=2)
        try:
            return await run_demo(
                pool,
                database_url=settings.database_url,
                clock=clock_from_offset(settings.clock_offset_seconds),
                gateway_url=gateway_url,
                subscriptions=subscriptions,
                due_within=timedelta(seconds=due_within_s),
                decline_share=decline_share,
                timeout=timedelta(seconds=timeout_s),
                plot_path=Path(plot),
                console=console,
                gateway_timeout=timedelta(seconds=gateway_timeout_s),
            )
        finally:
            await pool.close()

    try:
        outcome = asyncio.run(go())
    except DemoFailed as exc:
        outcome = Outcome([str(exc)])
    if not outcome.ok:
        typer.echo(f"demo failed: {'; '.join(outcome.problems)}", err=True)
        raise typer.Exit(1)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
