"""The simulator asks for the scheduling priority of a gateway on machines of its own."""

from __future__ import annotations

import os

import pytest

from services.gateway_sim import main as sim_main


def test_the_asked_priority_is_set_when_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[int, int, int]] = []
    monkeypatch.setattr(os, "setpriority", lambda *args: asked.append(args))
    sim_main.own_priority(-10)
    assert asked == [(os.PRIO_PROCESS, 0, -10)]


def test_a_refused_priority_leaves_the_process_as_it_is(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(*_: int) -> None:
        raise PermissionError("not permitted")

    monkeypatch.setattr(os, "setpriority", refuse)
    sim_main.own_priority(-10)  # no exception: the simulator starts all the same
    assert "gateway_sim_priority_kept" in capsys.readouterr().out
