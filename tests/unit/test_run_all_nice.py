"""``billing run-all`` reads a process's nice value off its Procfile command and says so when
the system refuses it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from services.ops.run_all import nice_of, take_nice


def test_a_nice_prefix_is_taken_off_the_command() -> None:
    assert nice_of("nice -n 10 billing notifier") == (10, "billing notifier")
    assert nice_of("nice -n -10 billing gateway-sim") == (-10, "billing gateway-sim")


def test_a_command_without_the_prefix_is_left_as_it_is() -> None:
    assert nice_of("billing api") == (None, "billing api")
    assert nice_of("env A=1 nice -n 5 billing relay") == (None, "env A=1 nice -n 5 billing relay")


def test_a_refused_value_is_said_and_the_session_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    def refuse(_: int) -> int:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "nice", refuse)
    autogroup = tmp_path / "autogroup"
    autogroup.write_text("/autogroup-42 nice 0\n", encoding="ascii")
    take_nice(-10, autogroup)  # no exception: the process starts all the same
    assert "nice -10 refused (Operation not permitted)" in capfd.readouterr().err
    assert autogroup.read_text(encoding="ascii") == "/autogroup-42 nice 0\n"
