"""``billing_build_info``: which build a process runs (always 1; the labels say what)."""

from __future__ import annotations

import platform
from importlib import metadata

from prometheus_client import Gauge

BUILD_INFO = Gauge(
    "billing_build_info",
    "The running build: always 1, labelled with the package version, process and Python.",
    ["version", "process", "python"],
)


def version() -> str:
    try:
        return metadata.version("billing")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def publish(process: str) -> None:
    """Export this process's build (once, at start)."""
    BUILD_INFO.labels(version=version(), process=process, python=platform.python_version()).set(1)
