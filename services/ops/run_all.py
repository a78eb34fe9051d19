"""``billing run-all`` (``make up``): every process of a Procfile in the foreground, together.

The processes run under honcho's manager, exactly as ``honcho start`` runs them: the caller's
environment, then the env files (the development profile ``deploy/dev.env``; later files win),
then the ``--set NAME=VALUE`` overrides (``BILLING_LOG_JSON=true make up`` passes
``--set BILLING_LOG_JSON=true``). In JSON mode the output is JSON lines only:
the processes' own lines pass through as they are, and the supervisor's (a process started or
stopped) and anything a process printed that is not a JSON object (a crash before its logging was
set up) become JSON lines too, with ``logger`` and ``process`` like every other line.

A Procfile line ``name: nice -n N command`` runs ``command`` with ``N`` added to its nice value.
The manager starts each process in a session of its own, and where Linux shares the CPU between
sessions first (``autogroup``) a nice value weighs only inside its session: the runner gives
both the process and its session the value as it starts it. A value the system refuses (a
negative one, not root) is said on the process's output, and the process runs as it was.
"""

from __future__ import annotations

import json
import os
import re
import sys
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, TextIO

TRUE = {"1", "true", "yes", "on"}
NICED = re.compile(r"nice -n (-?\d+) +(\S.*)")
AUTOGROUP = Path("/proc/self/autogroup")


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


def nice_of(command: str) -> tuple[int | None, str]:
    """A Procfile command's ``nice -n N`` prefix taken off: ``(N, the rest)``, else
    ``(None, command)``."""
    niced = NICED.fullmatch(command.strip())
    if niced is None:
        return None, command
    return int(niced[1]), niced[2]


def take_nice(nice: int, autogroup: Path = AUTOGROUP) -> None:
    """In a started child, the leader of a session of its own, before its command runs: ``nice``
    added to the child's nice value, and the result given to its session (where the kernel
    groups by session)."""
    try:
        now = os.nice(nice)
        if autogroup.exists():
            autogroup.write_text(str(now), encoding="ascii")
    except OSError as exc:
        kept = os.getpriority(os.PRIO_PROCESS, 0)
        os.write(2, f"nice {nice} refused ({exc.strerror}): runs at nice {kept}\n".encode())


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
    from honcho.process import Popen  # noqa: PLC0415

    env = environment(env_files, overrides or {})
    json_logs = env.get("BILLING_LOG_JSON", "").strip().lower() in TRUE
    manager = Manager(printer=JsonLinesPrinter(sys.stdout) if json_logs else Printer(sys.stdout))
    processes = parse_procfile(procfile.read_text(encoding="utf-8")).processes
    for process in expand_processes(processes, env=env):
        nice, command = nice_of(process.cmd)
        started = manager.add_process(process.name, command, quiet=process.quiet, env=process.env)
        if nice is not None:  # honcho's Popen starts the session (setsid) before preexec_fn
            started._child_ctor = partial(Popen, preexec_fn=partial(take_nice, nice))
    manager.loop()
    return int(manager.returncode or 0)
