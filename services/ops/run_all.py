"""``billing run-all`` (``make up``): every process of a Procfile in the foreground, together.

The processes run under honcho's manager, exactly as ``honcho start`` runs them: the caller's
environment, then the env files (the development profile ``deploy/dev.env``; later files win),
then the ``--set NAME=VALUE`` overrides (``BILLING_LOG_JSON=true make up`` passes
``--set BILLING_LOG_JSON=true``). In JSON mode the output is JSON lines only:
the processes' own lines pass through as they are, and the supervisor's (a process started or
stopped) and anything a process printed that is not a JSON object (a crash before its logging was
set up) become JSON lines too, with ``logger`` and ``process`` like every other line.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from billing_core.runtime.priority import SESSION_OF_ITS_OWN

TRUE = {"1", "true", "yes", "on"}


def json_line(event: str, *, logger: str, process: str, level: str = "info") -> str:
    return json.dumps(
        {
            "event": event,
            "logger": logger,
            "process": process,
            "level": level,
            "timestamp": datetime.now(UTC)
            .isoformat(timespec="microseconds")
            .replace("+00:00", "Z"),
        }
    )


def as_json_line(line: str, name: str) -> str:
    """``line`` of the process ``name`` (or of the supervisor, ``system``) as a JSON line."""
    if name != "system":
        try:
            if isinstance(json.loads(line), dict):
                return line
        except ValueError:
            pass
        return json_line(line, logger="stdout", process=name)
    return json_line(line, logger="supervisor", process="run-all")


class JsonLinesPrinter:
    """A honcho printer writing JSON lines only."""

    def __init__(self, output: TextIO) -> None:
        self.output = output
        self.width = 0  # honcho sets it; prefixes are not written

    def write(self, message: Any) -> None:
        data = message.data
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)
        for line in text.splitlines():
            if line.strip():
                print(as_json_line(line, message.name or "system"), file=self.output, flush=True)


def environment(env_files: list[Path], overrides: dict[str, str]) -> dict[str, str]:
    from honcho.environ import parse  # noqa: PLC0415  (development dependency)

    merged = dict(os.environ)
    for path in env_files:
        merged.update(parse(path.read_text(encoding="utf-8")))
    merged.update(overrides)
    return merged


def run(procfile: Path, env_files: list[Path], overrides: dict[str, str] | None = None) -> int:
    """Run every process of ``procfile`` until one stops or Ctrl-C; return the exit code."""
    from honcho.environ import expand_processes, parse_procfile  # noqa: PLC0415
    from honcho.manager import Manager  # noqa: PLC0415
    from honcho.printer import Printer  # noqa: PLC0415

    env = environment(env_files, overrides or {})
    env[SESSION_OF_ITS_OWN] = "1"  # honcho starts each process in a session of its own
    json_logs = env.get("BILLING_LOG_JSON", "").strip().lower() in TRUE
    manager = Manager(printer=JsonLinesPrinter(sys.stdout) if json_logs else Printer(sys.stdout))
    processes = parse_procfile(procfile.read_text(encoding="utf-8")).processes
    for process in expand_processes(processes, env=env):
        manager.add_process(process.name, process.cmd, quiet=process.quiet, env=process.env)
    manager.loop()
    return int(manager.returncode or 0)
