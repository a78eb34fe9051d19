"""Running the project's processes for real in tests: free ports, start, wait, stop, kill."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from services.ops.run_all import take_nice

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Proc:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    url: str | None = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def terminate(self, timeout: float = 30) -> int:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            message = f"{self.name} ignored SIGTERM for {timeout} s:\n{self.log()}"
            raise AssertionError(message) from None

    def kill9(self) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()


SIMULATOR_NICE = -10


def niced(nice: int) -> dict[str, Any]:
    """``Popen`` options that start a process at ``nice``, in a session of its own, as the
    development runner does (``services.ops.run_all.take_nice``). The gateway simulator asks
    for :data:`SIMULATOR_NICE`: it stands in for a gateway on machines of its own, and its clock
    stamps arrivals for the rate limit."""
    if not nice:
        return {}
    return {"start_new_session": True, "preexec_fn": partial(take_nice, nice)}


def start(
    name: str,
    module: str,
    env: dict[str, str],
    log_dir: Path,
    *,
    ready_url: str | None = None,
    ready: Callable[[], bool] | None = None,
    timeout: float = 30,
    nice: int = 0,
) -> Proc:
    """``python -m module``, ready when ``ready_url`` answers 200 (or ``ready()``), at ``nice``
    (:func:`niced`)."""
    log_path = log_dir / f"{name}.log"
    full_env = {**os.environ, "BILLING_LOG_JSON": "false", **env}
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", module],
            cwd=ROOT,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            **niced(nice),
        )
    proc = Proc(name, process, log_path, ready_url.rsplit("/", 1)[0] if ready_url else None)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}:\n{proc.log()}")
        try:
            if ready_url is not None:
                if httpx.get(ready_url, timeout=1).status_code == 200:
                    return proc
            elif ready is None or ready():
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill9()
    raise RuntimeError(f"{name} not ready in {timeout} s:\n{proc.log()}")


def private_redis(tmp: Path) -> tuple[int, Callable[[], None], Callable[[], None]]:
    """A Redis of the test's own (to stop and restart it without touching the shared one)."""
    port = free_port()
    state: dict[str, subprocess.Popen[bytes]] = {}

    def up() -> None:
        state["p"] = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(tmp),
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError("private redis did not start")

    def down() -> None:
        p = state.pop("p", None)
        if p is not None:
            p.terminate()
            p.wait(timeout=10)

    up()
    return port, up, down
