"""One log pipeline: structlog's own lines and the standard library's (uvicorn, aiokafka, ...)
come out in one shape, each with its logger name and the process name."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from services.api.middleware import trace_id

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
import logging, structlog
from billing_core.logging import configure_logging, get_logger
configure_logging("billing.test", "INFO", json={json})
structlog.contextvars.bind_contextvars(request_id="r-1", trace_id="t-1")
get_logger("billing_core.usecases.cancel").info("subscription_canceled", subscription_id=7)
logging.getLogger("uvicorn.error").info("Started server process [%d]", 42,
    extra={{"color_message": "coloured"}})
logging.getLogger("aiokafka.conn").info("chatty connection detail")
logging.getLogger("aiokafka.conn").warning("broker unreachable")
try:
    1 / 0
except ZeroDivisionError:
    logging.getLogger("sqlalchemy.pool").exception("connection failed")
"""


def _run(json_logs: bool) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM.format(json=json_logs)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout == ""
    return done.stderr


def test_every_line_is_json_with_logger_process_and_correlation_ids() -> None:
    lines = [json.loads(line) for line in _run(True).splitlines()]
    assert [(x["logger"], x["event"]) for x in lines] == [
        ("billing_core.usecases.cancel", "subscription_canceled"),
        ("uvicorn.error", "Started server process [42]"),
        ("aiokafka.conn", "broker unreachable"),  # its INFO chatter is left out
        ("sqlalchemy.pool", "connection failed"),
    ]
    for line in lines:
        assert line["process"] == "billing.test"
        assert (line["request_id"], line["trace_id"]) == ("r-1", "t-1")
        assert line["timestamp"].endswith("Z")
        assert "color_message" not in line
    assert lines[0]["subscription_id"] == 7
    assert "ZeroDivisionError" in lines[-1]["exception"]


def test_the_console_renderer_serves_development_for_every_logger() -> None:
    out = re.sub(r"\x1b\[[0-9;]*m", "", _run(False))
    assert "subscription_canceled" in out and "Started server process [42]" in out
    assert "uvicorn.error" in out and "billing_core.usecases.cancel" in out
    assert not out.lstrip().startswith("{")


def test_trace_id_is_read_from_a_w3c_traceparent() -> None:
    header = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert trace_id(header) == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert trace_id(None) is None
    assert trace_id(b"00-" + b"0" * 32 + b"-00f067aa0ba902b7-01") is None
    assert trace_id(b"garbage") is None
