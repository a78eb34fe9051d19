"""One log pipeline: structlog's processors render every line, ours and the standard library's.

``configure_logging`` (once, in ``main()``) sets up structlog and routes the standard library's
``logging`` (uvicorn, aiokafka, SQLAlchemy, asyncio, ...) through the same processors, so every
line has the same shape: JSON (``BILLING_LOG_JSON=true``, production) or the console renderer
(development), each with ``timestamp``, ``level``, ``logger`` (the module's or library's logger
name), ``process`` (the billing process) and, when bound, the correlation ids (``request_id``,
``trace_id``, ``invoice_id`` ...).
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

# Libraries whose INFO lines are noise at our INFO level (connection chatter, pool events).
QUIET_LIBRARIES = ("aiokafka", "kafka", "sqlalchemy", "asyncio", "httpx", "httpcore")


class NamedPrintLogger(structlog.PrintLogger):
    """structlog's fast print logger, carrying the name it was asked for (``logger``)."""

    def __init__(self, file: TextIO, name: str) -> None:
        super().__init__(file)
        self.name = name


class NamedPrintLoggerFactory:
    def __init__(self, file: TextIO) -> None:
        self._file = file

    def __call__(self, *args: Any) -> NamedPrintLogger:
        return NamedPrintLogger(self._file, str(args[0]) if args else "billing")


def _process_name(process: str) -> Processor:
    def add(_logger: WrappedLogger, _method: str, event: EventDict) -> EventDict:
        event.setdefault("process", process)
        return event

    return add


def _logger_name(logger: WrappedLogger, _method: str, event: EventDict) -> EventDict:
    """``logger``: the stdlib record's name, or the name given to ``get_logger``."""
    record = event.get("_record")
    name = record.name if record is not None else getattr(logger, "name", None)
    event.setdefault("logger", name or "root")
    return event


def _drop_colour(_logger: WrappedLogger, _method: str, event: EventDict) -> EventDict:
    """uvicorn passes an ANSI-coloured copy of its message as an extra: not for log lines."""
    event.pop("color_message", None)
    return event


def _shared(process: str) -> list[Processor]:
    return [
        structlog.contextvars.merge_contextvars,
        _process_name(process),
        _logger_name,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]


def configure_logging(process: str, level: str = "INFO", json: bool = True) -> None:
    renderer: Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    )
    shared = _shared(process)
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
        logger_factory=NamedPrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.bind_contextvars(process=process)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.ExtraAdder(), _drop_colour],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level)
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLevelName(level)))


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    return structlog.get_logger(name)  # type: ignore[no-any-return]
