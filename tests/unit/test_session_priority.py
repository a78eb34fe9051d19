"""A process started in a session of its own gives the session its nice value (autogroup)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from billing_core.runtime.priority import SESSION_OF_ITS_OWN, share_nice_with_session

OWN = {SESSION_OF_ITS_OWN: "1"}


def autogroup_file(tmp_path: Path, nice: int) -> Path:
    path = tmp_path / "autogroup"
    path.write_text(f"/autogroup-42 nice {nice}\n", encoding="ascii")
    return path


def test_the_session_gets_the_process_nice_value(tmp_path: Path) -> None:
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    path = autogroup_file(tmp_path, mine + 5)
    assert share_nice_with_session(path, OWN) == mine
    assert path.read_text(encoding="ascii") == str(mine)


def test_a_session_not_said_to_be_its_own_is_left_alone(tmp_path: Path) -> None:
    path = autogroup_file(tmp_path, 7)
    assert share_nice_with_session(path, {}) is None
    assert share_nice_with_session(path, {SESSION_OF_ITS_OWN: "0"}) is None
    assert path.read_text(encoding="ascii").split()[-1] == "7"


def test_nothing_to_do_without_autogroup_or_when_equal(tmp_path: Path) -> None:
    assert share_nice_with_session(tmp_path / "absent", OWN) is None
    path = autogroup_file(tmp_path, os.getpriority(os.PRIO_PROCESS, 0))
    before = path.read_text(encoding="ascii")
    assert share_nice_with_session(path, OWN) is None
    assert path.read_text(encoding="ascii") == before


CHILD = (
    "from billing_core.runtime.priority import share_nice_with_session;"
    "share_nice_with_session();"
    "print(open('/proc/self/autogroup').read().split()[-1])"
)


def test_a_niced_process_in_a_session_of_its_own_lowers_its_session_on_this_kernel() -> None:
    if not Path("/proc/self/autogroup").exists():
        pytest.skip("this kernel does not group processes by session (no autogroup)")
    env = {**os.environ, **OWN, "BILLING_LOG_LEVEL": "WARNING"}
    out = subprocess.run(
        ["nice", "-n", "10", sys.executable, "-c", CHILD],
        env=env,
        start_new_session=True,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.split()[-1] == str(min(19, os.getpriority(os.PRIO_PROCESS, 0) + 10))
