"""``python -m services.gateway_sim`` / ``billing gateway-sim``: build the settings once, serve."""

from __future__ import annotations

import sys

import uvicorn
from pydantic import ValidationError

from billing_core.logging import configure_logging, get_logger
from services.gateway_sim.app import create_app
from services.gateway_sim.settings import GatewaySimSettings


def load_settings() -> GatewaySimSettings:
    """The settings, or exit with status 2 and one line per invalid field."""
    try:
        return GatewaySimSettings()
    except ValidationError as exc:
        lines = [
            f"  {'.'.join(str(p) for p in err['loc']) or 'settings'}: {err['msg']}"
            for err in exc.errors()
        ]
        print("gateway simulator: invalid settings\n" + "\n".join(lines), file=sys.stderr)
        raise SystemExit(2) from None


def main() -> None:
    settings = load_settings()
    configure_logging(settings.process_name, settings.log_level, settings.log_json)
    app = create_app(settings)
    try:
        uvicorn.run(
            app,
            host=settings.host,
            port=settings.port,
            loop="auto",
            http="auto",
            access_log=False,
            log_config=None,  # uvicorn logs through the root handler of configure_logging
            log_level="warning",
            timeout_graceful_shutdown=max(1, int(settings.late_answer_grace_seconds)),
            server_header=False,
            proxy_headers=False,
        )
    finally:
        get_logger(__name__).info("gateway_sim_stopped")
