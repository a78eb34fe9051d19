"""The running system's processes as ``/proc`` shows them: which pid is which Procfile entry,
the CPU time each has used and its resident memory."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.system import System

CLK_TCK = os.sysconf("SC_CLK_TCK")
_COMMANDS = {
    "api": "api",
    "renewer": "renewer",
    "relay": "relay",
    "gateway-sim": "gateway",
    "collector": "collector",
    "notifier": "notifier",
}


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            found.append(child)
            todo.append(child)
    return found


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def rss_bytes(pid: int) -> int:
    """Resident memory (``VmRSS``, which the kernel gives in kB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise ValueError(f"process {pid} has no VmRSS (a zombie?)")


def process_pids(system: System) -> dict[str, int]:
    """The Python process of each Procfile entry, told apart by command and health port."""
    assert system.pid is not None
    pids: dict[str, int] = {}
    for pid in descendants(system.pid):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) < 3 or not argv[1].endswith(b"billing"):
            continue
        name = _COMMANDS.get(argv[2].decode())
        if name == "collector":
            port = next((e for e in env if e.startswith(b"BILLING_COLLECTOR_HEALTH_PORT=")), b"")
            second = str(system.ports.collector2).encode()
            name = "collector2" if port.endswith(b"=" + second) else "collector"
        if name is not None:
            pids[name] = pid
    return pids
