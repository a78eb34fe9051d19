"""Run a process of the project with its host clock skewed, as a replica on a badly set host:
``python -m tests.support.skewed_clock`` with ``TEST_CLOCK_SKEW_SECONDS`` (the skew) and
``TEST_SKEWED_MODULE`` (the process's module, e.g. ``services.collector``).

Every "now" of the processes comes from :class:`billing_core.clock.SystemClock`; this moves it
by the skew before the process's own module runs, and changes nothing else.
"""

from __future__ import annotations

import os
import runpy
import sys
from datetime import datetime, timedelta

from billing_core import clock


def main() -> None:
    skew = timedelta(seconds=float(os.environ["TEST_CLOCK_SKEW_SECONDS"]))
    host_now = clock.SystemClock.now

    def skewed_now(self: clock.SystemClock) -> datetime:
        return host_now(self) + skew

    clock.SystemClock.now = skewed_now  # type: ignore[method-assign]
    module = os.environ["TEST_SKEWED_MODULE"]
    sys.argv = [module]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
