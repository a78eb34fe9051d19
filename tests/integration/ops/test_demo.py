"""``billing demo`` without a terminal, against the test database and a real gateway simulator.

No renewer, collector or relay runs, so the seeded subscriptions come due and stay due: the demo
times out. It must still print plain progress lines, its summary and the PNG, and end with exit 1
and one line saying why — also when the simulator stops answering mid-run — never a traceback.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.ops.demo_gateway import webhook_deliveries
from tests.support.processes import ROOT, Proc, free_port, start

pytestmark = pytest.mark.slow  # real-time whole-process scenarios: `make test`, not test-fast

PROGRESS = re.compile(r"^\[\s*\d+ s\] due subscriptions \d+, renewal invoices \d+, open \d+")


@pytest.fixture
def simulator(tmp_path: Path) -> Iterator[Proc]:
    port = free_port()
    sim = start(
        "gateway-sim",
        "services.gateway_sim",
        {"BILLING_GATEWAY_SIM_PORT": str(port)},
        tmp_path,
        ready_url=f"http://127.0.0.1:{port}/healthz",
    )
    try:
        yield sim
    finally:
        if sim.alive():
            sim.process.send_signal(signal.SIGCONT)
        sim.terminate()


def demo_command(gateway_url: str, plot: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "services.cli",
        "demo",
        "--subscriptions",
        "20",
        "--due-within-s",
        "1",
        "--decline-share",
        "0.1",
        "--gateway-url",
        gateway_url,
        "--wait-for",
        f"{gateway_url}/healthz",
        "--plot",
        str(plot),
        *extra,
    ]


def env() -> dict[str, str]:
    # The test session exported BILLING_DATABASE_URL (its own database) for child processes.
    return {**os.environ, "BILLING_LOG_JSON": "false", "COLUMNS": "200"}


async def run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        command,
        cwd=ROOT,
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def assert_one_clear_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    failures = [line for line in stderr.splitlines() if line.startswith("demo failed: ")]
    assert len(failures) == 1, stderr
    assert stderr.strip().splitlines()[-1] == failures[0]
    return failures[0]


def assert_png(path: Path) -> None:
    assert path.is_file()
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


async def test_without_a_tty_it_prints_progress_lines_then_on_timeout_its_summary_and_plot(
    engine: AsyncEngine, simulator: Proc, tmp_path: Path
) -> None:
    plot = tmp_path / "demo.png"
    done = await run(demo_command(str(simulator.url), plot, "--timeout-s", "8"))
    assert done.returncode == 1, done.stdout + done.stderr
    line = assert_one_clear_line(done.stderr)
    assert line == (
        "demo failed: did not drain within 8 s: 20 subscriptions due, 0 invoices open, "
        "0 events unpublished"
    )
    assert "\x1b[" not in done.stdout  # no live table, no colours: plain lines
    progress = [s for s in done.stdout.splitlines() if PROGRESS.match(s)]
    assert len(progress) >= 2, done.stdout  # t = 0, t = 5 s, and the last sample
    assert progress[-1].split("] ", 1)[1].startswith("due subscriptions 20,")
    assert "Demo summary (with problems)" in done.stdout
    assert "2 customers' cards will decline" in done.stdout
    for row in ("gateway calls (this demo)", "busiest rolling second", "gateway 429 answers"):
        assert row in done.stdout
    assert re.search(
        r"webhooks delivered / retried / failed / dropped .*0 / 0 / 0 / 0", done.stdout
    )
    assert "no (timeout)" in done.stdout
    assert "unavailable" not in done.stdout
    assert_png(plot)
    async with engine.connect() as conn:
        seeded = (await conn.execute(text("SELECT count(*) FROM subscription"))).scalar_one()
        # Each of its own customer, with an address the notifier sends its e-mails to.
        addresses = (
            await conn.execute(
                text(
                    "SELECT c.id, c.email FROM subscription s "
                    "JOIN customer c ON c.id = s.customer_id ORDER BY c.id"
                )
            )
        ).all()
    assert seeded == 20
    assert len({customer for customer, _ in addresses}) == 20
    assert all(email == f"customer-{customer}@example.test" for customer, email in addresses)


async def test_a_simulator_that_stops_answering_leaves_a_summary_a_plot_and_one_line(
    engine: AsyncEngine, simulator: Proc, tmp_path: Path
) -> None:
    plot = tmp_path / "demo.png"
    stderr_path = tmp_path / "stderr.txt"
    with stderr_path.open("w") as stderr:
        demo = subprocess.Popen(
            demo_command(str(simulator.url), plot, "--timeout-s", "6", "--gateway-timeout-s", "2"),
            cwd=ROOT,
            env=env(),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        try:
            assert demo.stdout is not None
            lines: list[str] = []
            deadline = time.monotonic() + 60
            for out in demo.stdout:  # the first progress line arrives while the demo runs
                lines.append(out)
                if PROGRESS.match(out) or time.monotonic() > deadline:
                    break
            assert PROGRESS.match(lines[-1]), "".join(lines)
            # Frozen, not dead: connections are accepted and then nothing answers (timeouts).
            simulator.process.send_signal(signal.SIGSTOP)
            rest, _ = demo.communicate(timeout=120)
        finally:
            if demo.poll() is None:
                demo.kill()
                demo.wait()
    stdout = "".join(lines) + rest
    assert demo.returncode == 1, stdout + stderr_path.read_text()
    line = assert_one_clear_line(stderr_path.read_text())
    assert re.match(r"demo failed: did not drain within 6 s: \d+ subscriptions due, ", line)
    assert (
        f"; the gateway simulator at {simulator.url} did not answer (GET /v1/ledger/summary: "
        "ReadTimeout after 2 s): its figures are unavailable"
    ) in line
    assert "Demo summary (with problems)" in stdout
    assert re.search(r"gateway calls \(this demo\)\s.*unavailable", stdout), stdout
    assert re.search(r"webhooks delivered .*unavailable", stdout), stdout
    assert_png(plot)


async def test_processes_not_answering_is_one_line_and_nothing_seeded(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    done = await run([*demo_command(nobody, tmp_path / "demo.png"), "--wait-s", "1"])
    assert done.returncode == 1, done.stdout + done.stderr
    line = assert_one_clear_line(done.stderr)
    assert line == (
        f"demo failed: not answering after 1 s: {nobody}/healthz (start the system with `make up`)"
    )
    async with engine.connect() as conn:
        seeded = (await conn.execute(text("SELECT count(*) FROM subscription"))).scalar_one()
    assert seeded == 0


def test_webhook_deliveries_are_read_from_the_prometheus_text() -> None:
    metrics = """\
# HELP billing_gateway_sim_webhook_deliveries_total Webhook delivery attempts and results.
# TYPE billing_gateway_sim_webhook_deliveries_total counter
billing_gateway_sim_webhook_deliveries_total{result="delivered"} 1234.0
billing_gateway_sim_webhook_deliveries_total{result="retried"} 7.0
billing_gateway_sim_webhook_deliveries_total{result="failed"} 1.0
billing_gateway_sim_webhook_deliveries_created{result="delivered"} 1.7e+09
# TYPE billing_gateway_sim_rate_limited_total counter
billing_gateway_sim_rate_limited_total 42.0
"""
    assert webhook_deliveries(metrics) == {"delivered": 1234, "retried": 7, "failed": 1}
    assert webhook_deliveries("# nothing here\n") == {}
