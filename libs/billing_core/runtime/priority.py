"""A process's nice value, made to count against the machine's other sessions.

Linux groups processes by session for CPU sharing (``autogroup``, on by default on desktops
and many servers): each session gets an equal share whatever its processes' nice values, which
weigh only inside it. A process manager that starts every process in a session of its own
(``billing run-all``, as ``honcho`` does) thereby voids ``nice -n 10 billing notifier`` and
the gateway simulator's own higher priority. Such a process gives its session its own nice
value, so that it weighs against the others as it would without grouping. Only when the
starter says the session is the process's own (``BILLING_SESSION_OF_ITS_OWN=1``): in a
terminal's session the value would apply to everything else started there.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from billing_core.logging import get_logger

SESSION_OF_ITS_OWN = "BILLING_SESSION_OF_ITS_OWN"
AUTOGROUP = Path("/proc/self/autogroup")


def share_nice_with_session(
    autogroup: Path = AUTOGROUP, environ: Mapping[str, str] = os.environ
) -> int | None:
    """Give this process's session (its autogroup) the process's nice value; the value set,
    or None when there was nothing to do or it was refused (logged)."""
    if environ.get(SESSION_OF_ITS_OWN) != "1":
        return None
    try:
        current = autogroup.read_text(encoding="ascii").split()[-1]
    except (OSError, IndexError):
        return None  # a kernel without autogroup: nice values already count machine-wide
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    if current == str(nice):
        return None
    log = get_logger(__name__)
    try:
        autogroup.write_text(str(nice), encoding="ascii")
    except OSError as exc:  # lowering it needs the same privilege as a negative nice
        log.info("session_priority_kept", asked=nice, now=current, error=repr(exc))
        return None
    log.info("session_priority", nice=nice)
    return nice
