"""Fixtures of the lifecycle tests: the API over ASGI (its clock shared with the renewer run
in-process) and a relay to the test topic, from the API and relay tests."""

from __future__ import annotations

from tests.integration.api.conftest import api_key, api_settings, app, client, clock
from tests.integration.relay.conftest import make_relay

__all__ = ["api_key", "api_settings", "app", "client", "clock", "make_relay"]
