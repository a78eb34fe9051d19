"""``billing run-all`` starts a Procfile's ``nice -n N`` process with the value added to its nice
value and gives the process's session that value too (where Linux shares the CPU between
sessions first, a nice value weighs only inside its session)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.processes import ROOT

AUTOGROUP = Path("/proc/self/autogroup")
# Each process prints its nice value and its session's, then waits so that both print before
# the first to end stops the other.
PROBE = (
    "import os, pathlib, time;"
    "a = pathlib.Path('/proc/self/autogroup');"
    "s = a.read_text().split()[-1] if a.exists() else '-';"
    "print('probe', os.getpriority(os.PRIO_PROCESS, 0), s, flush=True);"
    "time.sleep(3)"
)


def probes(tmp_path: Path) -> dict[str, list[str]]:
    procfile = tmp_path / "Procfile"
    procfile.write_text(
        f'niced: nice -n 7 {sys.executable} -c "{PROBE}"\nplain: {sys.executable} -c "{PROBE}"\n',
        encoding="utf-8",
    )
    out = subprocess.run(
        [sys.executable, "-m", "services.cli", "run-all", "-f", str(procfile)],
        cwd=ROOT,
        env={**os.environ, "BILLING_LOG_JSON": "false"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,  # the first probe to end stops the other: a non-zero code
    )
    seen: dict[str, list[str]] = {}
    for line in out.stdout.splitlines():
        name, _, text = line.partition("|")
        if text.strip().startswith("probe "):
            seen[name.split()[-1].split(".")[0]] = text.split()[1:]
    assert set(seen) == {"niced", "plain"}, out.stdout
    return seen


def test_a_niced_process_and_its_session_take_the_value(tmp_path: Path) -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    seen = probes(tmp_path)
    niced = str(min(19, base + 7))
    assert seen["niced"][0] == niced
    assert seen["plain"][0] == str(base)
    if AUTOGROUP.exists():
        assert seen["niced"][1] == niced
        assert seen["plain"][1] == "0"
