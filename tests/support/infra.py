"""Where the tests find PostgreSQL, Redis and Kafka: containers when a Docker engine answers,
otherwise the project's own loopback servers (scripts/infra.sh). stripe-mock always comes from
scripts/infra.sh (it installs it when missing). Never a fake, never a skip."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Services:
    how: str
    admin_database_url: str  # the maintenance database, to create the test database
    redis_url: str
    kafka_bootstrap: str
    stripe_mock_url: str

    def database_url(self, name: str) -> str:
        base, _, _ = self.admin_database_url.rpartition("/")
        return f"{base}/{name}"


def _say(message: str) -> None:
    print(f"[test-infra] {message}", file=sys.stderr, flush=True)


def docker_engine_available() -> bool:
    """True when a Docker engine answers its /_ping (on DOCKER_HOST or the default socket)."""
    if os.environ.get("BILLING_TEST_INFRA") == "local":
        return False
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        if host.startswith("unix://"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            address: str | tuple[str, int] = host.removeprefix("unix://")
        elif host.startswith("tcp://"):
            name, _, port = host.removeprefix("tcp://").partition(":")
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            address = (name, int(port or 2375))
        else:
            return False
        with sock:
            sock.settimeout(3)
            sock.connect(address)
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            status_line = sock.recv(64).split(b"\r\n", 1)[0]
            return status_line.startswith(b"HTTP/1.") and b" 200" in status_line
    except OSError:
        return False


def _infra_env() -> dict[str, str]:
    env = subprocess.run(
        [str(ROOT / "scripts" / "infra.sh"), "env"], check=True, capture_output=True, text=True
    ).stdout
    return dict(
        line.removeprefix("export ").split("=", 1) for line in env.splitlines() if "=" in line
    )


def _stripe_mock() -> str:
    subprocess.run(
        [str(ROOT / "scripts" / "infra.sh"), "start", "stripe-mock"], check=True, stdout=sys.stderr
    )
    return _infra_env()["BILLING_STRIPE_MOCK_URL"]


def _containers() -> Services:  # pragma: no cover - needs a Docker engine
    from testcontainers.kafka import KafkaContainer  # noqa: PLC0415
    from testcontainers.postgres import PostgresContainer  # noqa: PLC0415
    from testcontainers.redis import RedisContainer  # noqa: PLC0415

    pg = PostgresContainer("postgres:16", username="billing", password="billing", dbname="billing")
    redis = RedisContainer("redis:7")
    kafka = KafkaContainer("confluentinc/cp-kafka:7.6.0").with_kraft()
    for c in (pg, redis, kafka):
        c.start()
    host, port = pg.get_container_host_ip(), pg.get_exposed_port(5432)
    return Services(
        how="testcontainers (Docker engine found)",
        admin_database_url=f"postgresql+asyncpg://billing:billing@{host}:{port}/postgres",
        redis_url=f"redis://{redis.get_container_host_ip()}:{redis.get_exposed_port(6379)}/0",
        kafka_bootstrap=kafka.get_bootstrap_server(),
        stripe_mock_url=_stripe_mock(),
    )


def _local() -> Services:
    subprocess.run([str(ROOT / "scripts" / "infra.sh"), "up"], check=True, stdout=sys.stderr)
    values = _infra_env()
    db = values["BILLING_DATABASE_URL"]
    return Services(
        how="local servers started by scripts/infra.sh (no Docker engine)",
        admin_database_url=db.rpartition("/")[0] + "/postgres",
        redis_url=values["BILLING_REDIS_URL"],
        kafka_bootstrap=values["BILLING_KAFKA_BOOTSTRAP"],
        stripe_mock_url=values["BILLING_STRIPE_MOCK_URL"],
    )


def start_services() -> Services:
    services = _containers() if docker_engine_available() else _local()
    _say(f"using {services.how}")
    return services


def checkout_database_name() -> str:
    """One test database per checkout (two clones on one machine never collide) and per
    pytest-xdist worker (``make test-fast`` runs tests side by side, each on its own)."""
    digest = hashlib.sha1(str(ROOT).encode()).hexdigest()[:8]
    name = os.environ.get("BILLING_TEST_DB", f"billing_test_{digest}")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return f"{name}_{worker}" if worker else name
