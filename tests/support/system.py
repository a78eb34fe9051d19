"""The whole system started the way ``make up`` starts it: ``billing run-all`` (honcho's
manager), the Procfile and the development profile ``deploy/dev.env``, with only what must
differ on a shared machine (the database, ports, topic and rate-limit key) layered on top in a
second env file."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from honcho import environ

from billing_core.db import migrate
from tests.support.db import recreate_database
from tests.support.infra import Services, checkout_database_name
from tests.support.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DEV_PROFILE = ROOT / "deploy" / "dev.env"
PROCESSES = ("api", "renewer", "collector", "collector2", "relay", "gateway", "notifier")


@dataclass
class Ports:
    api: int = field(default_factory=free_port)
    gateway: int = field(default_factory=free_port)
    renewer: int = field(default_factory=free_port)
    collector: int = field(default_factory=free_port)
    collector2: int = field(default_factory=free_port)
    relay: int = field(default_factory=free_port)
    notifier: int = field(default_factory=free_port)

    def health_urls(self) -> dict[str, str]:
        return {name: f"http://127.0.0.1:{getattr(self, name)}/healthz" for name in PROCESSES}


class System:
    def __init__(
        self,
        *,
        database_url: str,
        redis_url: str,
        kafka_bootstrap: str,
        log_dir: Path,
        extra_env: dict[str, str] | None = None,
        log_json: bool = False,
    ) -> None:
        self.ports = Ports()
        self.log_json = log_json
        self.topic = f"billing.e2e.{uuid.uuid4().hex[:8]}"
        self.gateway_url = f"http://127.0.0.1:{self.ports.gateway}"
        self.api_url = f"http://127.0.0.1:{self.ports.api}"
        self.log_dir = log_dir
        self.log_path = log_dir / "system.log"
        self.overrides = {
            "BILLING_DATABASE_URL": database_url,
            "BILLING_REDIS_URL": redis_url,
            "BILLING_KAFKA_BOOTSTRAP": kafka_bootstrap,
            "BILLING_KAFKA_TOPIC": self.topic,
            "BILLING_API_PORT": str(self.ports.api),
            "BILLING_API_INTERNAL_PORT": "0",
            "BILLING_GATEWAY_SIM_PORT": str(self.ports.gateway),
            "BILLING_GATEWAY_SIM_WEBHOOK_URL": f"{self.api_url}/webhooks/payments",
            "BILLING_COLLECTOR_GATEWAY_URL": self.gateway_url,
            "BILLING_COLLECTOR_RATE_LIMIT_KEY": f"e2e:{uuid.uuid4().hex[:8]}:permits",
            "BILLING_RENEWER_HEALTH_PORT": str(self.ports.renewer),
            "BILLING_COLLECTOR_HEALTH_PORT": str(self.ports.collector),
            "BILLING_COLLECTOR2_HEALTH_PORT": str(self.ports.collector2),
            "BILLING_RELAY_HEALTH_PORT": str(self.ports.relay),
            "BILLING_NOTIFIER_HEALTH_PORT": str(self.ports.notifier),
            "BILLING_NOTIFIER_GROUP_ID": f"e2e-notifier-{uuid.uuid4().hex[:8]}",
            **(extra_env or {}),
        }
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The supervisor's process id (every process of the system is its descendant)."""
        return None if self._proc is None else self._proc.pid

    def env(self) -> dict[str, str]:
        """What a process of this system sees: the dev profile, then the overrides."""
        profile = environ.parse(DEV_PROFILE.read_text())
        return {
            **os.environ,
            **profile,
            **self.overrides,
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def start(self, timeout: float = 120) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        override_file = self.log_dir / "system.env"
        override_file.write_text("".join(f"{k}={v}\n" for k, v in self.overrides.items()))
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                [
                    str(BIN / "billing"),
                    "run-all",
                    "-e",
                    str(DEV_PROFILE),
                    "-e",
                    str(override_file),
                    "-f",
                    str(ROOT / "Procfile"),
                    *(["--set", "BILLING_LOG_JSON=true"] if self.log_json else []),
                ],
                cwd=ROOT,
                env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        missing = self.wait_healthy(timeout)
        if missing:
            self.stop()
            raise RuntimeError(f"not healthy after {timeout:g} s: {missing}\n{self.log_tail()}")

    def wait_healthy(self, timeout: float) -> list[str]:
        deadline = time.monotonic() + timeout
        missing = list(self.ports.health_urls().values())
        while missing and time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                break
            still = []
            for url in missing:
                try:
                    if httpx.get(url, timeout=2).status_code != 200:
                        still.append(url)
                except httpx.HTTPError:
                    still.append(url)
            missing = still
            if missing:
                time.sleep(0.5)
        return missing

    def cli(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        """``billing ARGS`` with the system's environment, as a newcomer runs it beside it."""
        return subprocess.run(
            [str(BIN / "billing"), *args],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def stop(self, timeout: float = 60) -> bool:
        """SIGTERM to the supervisor, which passes it on (Ctrl-C on ``make up`` does the same);
        True when every process stopped by itself, False when it or this had to SIGKILL one."""
        proc = self._proc
        if proc is None:
            return True
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
                return False
        return "SIGKILL" not in self.log_path.read_text(errors="replace")

    def log_tail(self, lines: int = 60) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@contextmanager
def running_system(
    services: Services, database_suffix: str, log_dir: Path, **options: Any
) -> Iterator[System]:
    """The whole system on a fresh migrated database of this checkout (``<name>_<suffix>``),
    stopped on exit; ``options`` go to :class:`System` (``extra_env``, ``log_json``)."""
    name = f"{checkout_database_name()}_{database_suffix}"
    asyncio.run(recreate_database(services.admin_database_url, name))
    url = services.database_url(name)
    migrate.upgrade(url)
    running = System(
        database_url=url,
        redis_url=services.redis_url,
        kafka_bootstrap=services.kafka_bootstrap,
        log_dir=log_dir,
        **options,
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()
