"""Entry point: ``billing api`` / ``python -m services.api``. One uvicorn worker per process;
scale by running more replicas behind the load balancer."""

from __future__ import annotations

import uvicorn

from billing_core.clock import clock_from_offset
from billing_core.logging import configure_logging
from billing_core.runtime import build_info
from billing_core.runtime.garbage_collection import quiet_garbage_collector
from services.api.app import UnsafeSettings, create_app
from services.api.settings import ApiSettings


def main() -> None:
    settings = ApiSettings()
    configure_logging(settings.process_name, settings.log_level, settings.log_json)
    build_info.publish("api")
    try:
        app = create_app(settings, clock_from_offset(settings.clock_offset_seconds))
    except UnsafeSettings:
        raise SystemExit(2) from None  # logged, naming the settings
    # The app, its routes and models live as long as the process: never scanned again, and
    # full collections made rare (a full collection stalls every request in flight).
    quiet_garbage_collector()
    uvicorn.run(
        app,
        host=settings.api_host,
        port=settings.api_port,
        workers=1,
        access_log=settings.access_log,
        log_config=None,  # uvicorn logs through the root handler of configure_logging
        log_level=settings.log_level.lower(),
        proxy_headers=True,
        forwarded_allow_ips=settings.api_forwarded_allow_ips,
        server_header=False,
        timeout_graceful_shutdown=10,
    )
