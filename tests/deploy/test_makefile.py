"""The Makefile's benchmark targets pass their size through to the benchmark (``make -n``: the
commands, not run)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def dry_run(*args: str) -> str:
    done = subprocess.run(
        ["make", "-n", *args], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout


def bench_command(output: str) -> str:
    """The benchmark's command line, its continuation lines joined."""
    joined = output.replace("\\\n", " ")
    [line] = [line for line in joined.splitlines() if "bench.first_of_month" in line]
    return " ".join(line.split())


def test_subscriptions_reaches_the_first_of_the_month_benchmark() -> None:
    command = bench_command(dry_run("bench-first-of-month", "SUBSCRIPTIONS=20000"))
    assert command.endswith(
        "-m bench.first_of_month --json var/bench-first-of-month.json --subscriptions 20000"
    )


def test_without_subscriptions_the_benchmark_keeps_its_own_default() -> None:
    command = bench_command(dry_run("bench-first-of-month"))
    assert "--subscriptions" not in command
