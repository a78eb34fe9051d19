"""The ``billing`` command: one entry point for every process and operator task."""

from __future__ import annotations

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
    """Create an API client and print its key (shown once; only its hash is stored)."""
    from services.api.admin import create_api_key as create  # noqa: PLC0415
    from services.api.settings import ApiSettings  # noqa: PLC0415

    typer.echo(create(ApiSettings(), name))


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


@app.command("gateway-sim")
def gateway_sim() -> None:
    """Run the payment gateway simulator (development, demos, tests, benchmarks)."""
    from services.gateway_sim.main import main as run  # noqa: PLC0415

    run()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
